"""What every concern shares: backoff, error text, health stamps, and the loop the leader's services run in."""

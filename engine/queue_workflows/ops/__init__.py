"""What an operator asks of the queue: overviews, job stories, cancel and retry."""

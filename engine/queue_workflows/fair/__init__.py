"""Weighted fair share across tenants: weights, shares and the claim's tenant order (docs/flow_control.md)."""

"""The GPU side: what the engine knows about devices, their errors, and their health."""

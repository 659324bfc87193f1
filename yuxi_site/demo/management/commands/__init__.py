"""`seed_demo`."""

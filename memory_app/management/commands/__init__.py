"""The memory app's management commands."""

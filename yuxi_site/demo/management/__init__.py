"""The demo app's management commands."""

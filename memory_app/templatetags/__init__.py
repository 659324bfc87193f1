"""Template filters of the user's page."""

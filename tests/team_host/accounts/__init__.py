"""The team's accounts: Django's documented email-login user model and the API tokens it issues."""

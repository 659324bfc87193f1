"""The site: settings, URLs, error views, the admin base, and utilities both apps share."""

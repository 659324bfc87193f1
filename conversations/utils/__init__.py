"""Utilities both apps share: connections, statement counting, ids, text and database functions."""

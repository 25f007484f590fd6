"""app/api."""

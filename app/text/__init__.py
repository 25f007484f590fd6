"""app/text."""

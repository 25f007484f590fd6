"""app/core."""

"""app/edge."""

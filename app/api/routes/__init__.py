"""app/api/routes."""

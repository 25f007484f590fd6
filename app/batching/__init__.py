"""app/batching."""

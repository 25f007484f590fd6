"""app/tasks."""

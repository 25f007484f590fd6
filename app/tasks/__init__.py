"""app/tasks: the task objects (app/tasks/task.py) and the handlers that run their batches."""

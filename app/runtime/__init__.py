"""The models' runtime in a process that serves them: their life cycle (`lifecycle`: discovery, loading,
readiness, graphs, shutdown) and their batchers (`queues`). Imports nothing itself."""

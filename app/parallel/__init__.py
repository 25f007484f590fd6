"""Serving from several processes (APP_HTTP_WORKERS or APP_MODEL_PROCESSES > 1): N HTTP processes share one
listening socket and run the whole app (limits, auth, parsing, validation, JSON) with a RemoteService in place
of the Service; M model processes each run a Service (models, batchers, their share of the admission limits)
on their share of the cores or their GPU, and answer them over Unix sockets; a supervisor starts, watches,
restarts and drains them. docs/scaling.md."""

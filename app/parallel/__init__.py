"""Serving from several processes (APP_HTTP_WORKERS > 1): N HTTP processes share one listening socket and
run the whole app (limits, auth, parsing, validation, JSON) with a RemoteService in place of the Service; one
model process runs the one Service (models, batchers, admission limits) and answers them over a Unix socket;
a supervisor starts, watches, restarts and drains them. docs/scaling.md."""

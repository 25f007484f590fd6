"""What the routes call (`protocol`: Serving, whichever process answers) and its in-process implementation
(`service`: Service, the models of this process). Imports nothing itself: an HTTP process reads the
protocol without loading the service."""

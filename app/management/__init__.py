"""Models managed while serving: the checkpoint directory's listing, and a model loaded, reloaded (a new
version swapped in) or unloaded in every process without a restart (POST /admin/models/...)."""

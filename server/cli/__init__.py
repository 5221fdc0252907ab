"""The `braid` command (main.py: serve, reindex, user add; project.py: open, export): the
entry point above every layer, the one place that starts the web app.

`python -m server.cli` runs it too (__main__.py). The top layer: may import every package
of `server` (the web app for `serve`, the app's `Braid` for the rest)."""

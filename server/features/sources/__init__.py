"""A session from the user's own project and back: where an import comes from (sources.py,
git_urls.py), the import itself (importing.py), update from source (sync.py), and export to
a folder or a branch (exporting.py, export_branch.py).

Part of the `features` layer: may import every layer below it and the rest of `features`."""

"""What the index and the disk hold: Braid's own index-file writer (index_file.py,
index_format.py), staging (`StagingIndex`, `Pending`: parts of GitSession), user edits
found in O(change) (scan.py, with the watcher, watch.py) and the one guarded writer inside
a session folder (guarded.py).

Part of the `git` layer: may import `server.base` and `server.git`."""

"""The session repository as git: `GitSession` (session.py) and what it is made of —
objects written from bytes (objects.py, loose.py, packwriter.py), trees and lookups that
do not leak names (trees.py, lookup.py), the history listings (history.py), checkpoint
commit messages (commits.py), packing at rest, and the git CLI run safely (safe.py).
`git.workdir` is the index file and the disk: staging, scanning and the guarded writer.

May import `server.base` only. Knows nothing of turns, runs' meaning, users or the web."""

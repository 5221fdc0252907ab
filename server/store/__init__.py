"""Sessions on disk: the `SessionStore` (session_store.py; one lane per session), where a
branch's messages and runs live (layout.py), the context budget over them (context.py),
the intent journal and the all-or-nothing operations built on it (journal.py, atomic.py),
checkpoints, backups, sibling lineage, branch locks, users, the SQLite index with the
message queue kept in it (queue.py) and its full-text search over message text (search.py).

May import `server.base` and `server.git`."""

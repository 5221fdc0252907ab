"""Storage behind the Protocols of the layers below: which one a Braid uses (choose.py), and
the PostgreSQL team server (pg_*.py): the index and its message search, users, branch
locks, the event bus, the run registry and the message queue shared by several processes.
The SQLite index, its search, users and queue are in `store`.

May import every layer below it; never `app` or `web`."""

"""The words every layer shares: errors (each with a `code`), ids, settings, typed records
and their JSON, the one name rule, crash points, thread pools, renames and directory
handles, the import budget, the event bus.

Imports nothing of `server` (the bottom layer); only the standard library and small
libraries (orjson)."""

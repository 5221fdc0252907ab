"""The composition root: `Braid` (braid.py) makes the stores, backends, model client and
live runs and hands them to the features as `agent.services.Services`; start-up recovery
(recovery.py), the index rebuilt (reindex.py), the server's record of where it serves
(runinfo.py), and memory given back when quiet (memory.py, gc_tuning.py).

May import every layer below it; never `web` (which is built on it) nor `cli`."""

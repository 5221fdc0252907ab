"""The turn: one user input and the model loop that answers it (turns.py), its record as it
is made (turn_context.py), one tool call (turn_tools.py) and the user's approval it may wait
for (approvals.py), the tools confined to `workdir/` (tools.py, tool_paths.py, patch.py,
shell.py), what a turn changed (turn_changes.py), the model's own sub-agents and merges
(orchestrate.py: each child run on its worktree, driven by the `turns.launch` the driver
hands down), and the runs this process drives (live_runs.py). services.py is the
Protocol of what a turn is given (`Services`), which `app.braid.Braid` provides.

May import `server.base`, `server.git`, `server.store` and `server.model`."""

"""The sandbox every command of the agent runs in (DESIGN §4 "The shell"): bubblewrap's
namespaces build what a command sees (box.py), a cgroup per command bounds and ends it
(limits.py), and the egress proxy lets it reach the web hosts its session allows
(egress.py, addresses.py). The shell (agent/shell.py) and the MCP servers use it.

May import `server.base` only: nothing here knows of sessions, turns or the store."""

"""The sandbox every command of the agent runs in (DESIGN §4 "The shell"): bubblewrap's
namespaces build what a command sees (box.py), a seccomp filter keeps it from the kernel's
riskiest calls (syscalls.py), a cgroup per command bounds and ends it (limits.py), a
sandbox made before its command comes keeps that to a few ms (start.py), and the egress
proxy lets it reach the web hosts its session allows (egress.py, addresses.py). The shell
(agent/shell.py) and the MCP servers use it.

May import `server.base` only: nothing here knows of sessions, turns or the store."""

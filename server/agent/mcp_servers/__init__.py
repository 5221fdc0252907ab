"""MCP servers' tools offered to the model (DESIGN §4 "MCP tools"): the `mcpServers`
configuration (config.py), how a stdio server is started and what a kill leaves behind
(launch.py), one live connection to a server (connection.py), and the pool of a process's
connections per session, with the tools they offer (pool.py).

Part of the `agent` layer: may import `server.base`, `server.git`, `server.store`,
`server.model`, and the `mcp` SDK."""

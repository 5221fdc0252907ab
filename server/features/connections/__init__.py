"""A user's own connections, added on the page without a restart (DESIGN §4 "MCP tools",
§8): OpenAI-compatible model endpoints (base URL, key, models) and HTTP MCP servers (URL,
headers). Listing, adding and removing them (own.py), and trying one before it is kept
(probe.py). The users backend keeps them (store/users.py); their keys and headers never come
back out of the server.

Part of the `features` layer: may import every layer below it and the rest of `features`."""

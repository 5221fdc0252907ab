"""Braid: a browser chat app for an LLM agent that works on files, every session a git
repository.

The packages are layers; each imports only the ones below it (the `layers` contract in
pyproject.toml, checked by `lint-imports`):

    web        the transport: Starlette routes, the socket, pages and HTML frames
    app        the composition root (`Braid`), start-up recovery, the CLI
    backends   SQLite and PostgreSQL behind the store's and the agent's Protocols
    features   what a user does to a session: revert, time travel, fork, sub-agents, merge...
    agent      the turn: the model loop, the tools, the shell, live runs
    model      the model client, its stream, its messages, endpoints, the demo model
    store      sessions on disk: the store, layout, records' places, journal, safe operations
    git        the session repository: objects, trees, the index, the workdir, packing
    base       words every layer shares: errors, ids, settings, records, the name rule
"""

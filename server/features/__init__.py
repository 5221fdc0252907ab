"""What a user does to a session, one module per verb: revert a turn, time travel, fork,
sub-agents and their merge, the DAG, files, uploads, session metadata (approvals too) and
model choice, roots, the message queue, search; `features.sources` is import and export.

May import every layer below it (`base`, `git`, `store`, `model`, `agent`); never `backends`,
`app` or `web` (they are given as `agent.services.Services`)."""

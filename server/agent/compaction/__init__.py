"""What the model is sent, and compaction (issue 33): request.py makes a call's messages
(instructions, a summary's place, masking, the budget) and plans a compaction; run.py makes
one as a run of its own, before a turn's first call or on demand (`compact`);
instructions.py reads the instructions in effect (AGENTS.md, BRAID_INSTRUCTIONS).

May import `server.base`, `server.git`, `server.store`, `server.model` and the agent's turn
pieces (live_runs, turn_context, tools, orchestrate); never `server.agent.turns`, which
imports it."""

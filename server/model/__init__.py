"""The model: the `openai` client against any OpenAI-compatible endpoint (client.py,
endpoints.py), a stream assembled into a reply (stream.py), messages as servers accept them
(messages.py, body.py), and the embedded demo model (demo.py, demo_script.py).

May import `server.base` only (a model knows nothing of sessions)."""

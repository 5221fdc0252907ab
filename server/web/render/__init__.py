"""HTML for the page and the socket: pure renderers from core records and events to the
Jinja2 partials (`templates/_noun.html`) both share; Markdown without raw HTML, highlighting,
readable names for branches and runs, the DAG's lanes.

Part of the `web` layer: may import every layer below it and the rest of `web`."""

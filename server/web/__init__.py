"""The transport: the Starlette app declared as data (app.py), token auth and the origin
check (auth.py), every action declared once for the socket and HTTP (actions.py, specs.py,
params.py), the socket (ws.py), pages and partials; `web.render` makes the HTML (pure
renderers over Jinja2 partials shared by page and socket).

The top layer: may import everything below."""

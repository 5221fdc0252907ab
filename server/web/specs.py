"""The machinery behind the action declarations (`actions.py`): a spec names an action, its
typed parameters, the core function it calls, its HTTP route if it has one, and how its HTTP
answer is made. From the list of specs come both the socket's `ACTIONS` table and the HTTP
API's routes, so the two transports parse the same parameters the same way and call the
same core function (DESIGN §5).

Parsing (params.py) happens here, once, before the core is called: every parameter is parsed
first, so a malformed one answers `bad_request` whatever else the input holds; a parameter
that parsed but can name nothing (`NotFound`) is reported next; the core then looks things
up (an unknown or foreign session, run or branch is `not_found`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from server.base.errors import BadRequest, NotFound
from server.web import hostile
from server.web import params as P
from server.web.auth import api_401, login_required, user_of

if TYPE_CHECKING:
    from server.app.braid import Braid

Core = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class Param:
    """One parameter: `parse` turns the raw value (None when missing) into the typed argument
    the core function takes under `name`. `aliases` are other names clients may use;
    `many`: a list, which an htmx form sends as a string when one box is ticked; `whole`:
    parsed from all the input at once (fields that count only when present)."""

    name: str
    parse: P.Parser
    aliases: tuple[str, ...] = ()
    http_name: str | None = None  # its name over HTTP, where that differs
    many: bool = False
    whole: bool = False


@dataclass(frozen=True)
class Http:
    """An action's HTTP route. Parameters come from the path, then the query string (GET) or
    the JSON body (other methods). `call` replaces the action's core function where HTTP
    answers differently (it waits for the run to end); `respond` makes the response."""

    method: str
    path: str
    status: int = 200
    call: Core | None = None
    respond: Callable[[Any, int], Response] | None = None


@dataclass(frozen=True)
class Action:
    name: str
    call: Core  # core(braid, user_id, [session_id,] **typed params)
    params: tuple[Param, ...] = ()
    http: Http | None = None
    socket: bool = True  # False: HTTP only (sessions as a whole, downloads)
    session: bool = True  # the call takes the session's id (the socket's session)
    doc: str = field(default="", compare=False)


@dataclass
class ActionContext:
    braid: Braid
    user_id: str
    session_id: str
    # "html" frames come from htmx forms, where one ticked box is a string, not a list.
    fmt: str = "json"


def _raw(param: Param, raw: dict[str, Any], http: bool) -> object:
    names = ((param.http_name or param.name) if http else param.name, *param.aliases)
    return next((raw[n] for n in names if n in raw), None)


def parse_params(action: Action, raw: dict[str, Any], *, http: bool = False,
                 form: bool = False) -> dict[str, Any]:
    """The typed arguments of `action` from a client's raw parameters."""
    out: dict[str, Any] = {}
    unknown: NotFound | None = None
    for param in action.params:
        value = raw if param.whole else _raw(param, raw, http)
        if param.many and form and isinstance(value, str):
            value = [value]
        try:
            out[param.name] = param.parse(value)
        except NotFound as e:  # reported once every parameter parsed
            unknown = unknown or e
    if unknown is not None:
        raise unknown
    return out


# -- the socket ---------------------------------------------------------------------------

Handler = Callable[[ActionContext, dict[str, Any]], Awaitable[Any]]


def socket_handler(action: Action) -> Handler:
    async def handle(ctx: ActionContext, frame: dict[str, Any]) -> Any:
        kwargs = parse_params(action, frame, form=ctx.fmt == "html")
        return await action.call(ctx.braid, ctx.user_id, ctx.session_id, **kwargs)

    return handle


def socket_table(actions: list[Action]) -> dict[str, Handler]:
    return {a.name: socket_handler(a) for a in actions if a.socket}


# -- HTTP ---------------------------------------------------------------------------------


async def body(request: Request) -> dict[str, Any]:
    # Read while it streams in, capped: a 200 MB body is refused, never held in memory.
    raw = await hostile.read_capped(request.stream(), request.headers.get("content-length"))
    if not raw:
        return {}
    data = hostile.loads(raw, "body")
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    return data


def json_response(result: Any, status: int) -> Response:
    return JSONResponse(result, status_code=status)


def http_endpoint(action: Action) -> Callable[[Request], Awaitable[Response]]:
    """The route of `action`, behind the login (`http_routes`); errors are the app's
    handlers'."""
    http = action.http
    assert http is not None
    call = http.call or action.call
    respond = http.respond or json_response

    async def endpoint(request: Request) -> Response:
        user_id = user_of(request)
        raw: dict[str, Any] = dict(request.query_params) if http.method == "GET" \
            else await body(request)
        raw.update(request.path_params)
        args: list[Any] = [request.app.state.braid, user_id]
        if action.session:
            args.append(P.session_id(raw.get("session_id")))
        kwargs = parse_params(action, raw, http=True)
        return respond(await call(*args, **kwargs), http.status)

    return endpoint


def http_routes(actions: list[Action]) -> list[Route]:
    return [Route(a.http.path, login_required(api_401, http_endpoint(a)),
                  methods=[a.http.method])
            for a in actions if a.http is not None]

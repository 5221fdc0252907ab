"""A session's consent to its commands' network (DESIGN §4 "The shell"): `shell_network` in
`session.json` is `ask` (the default: the first request to each host waits for the user,
an `approval_needed` of tool `network`), `on` (every public host) or `off` (none). A host
the user approved joins the session's `shell_network_hosts` (features/session_meta.settle),
so it is not asked again; the user can take it back (`update_session`). Addresses of the
server's own network are refused before any question (sandbox/egress.py)."""

from __future__ import annotations

import asyncio
import itertools
from typing import TYPE_CHECKING

from server.agent import approvals
from server.base.records import SessionMeta

if TYPE_CHECKING:
    from server.agent.services import Services
    from server.agent.turn_context import TurnContext

MODES = ("ask", "on", "off")
TOOL = "network"


def mode_of(meta: SessionMeta) -> str:
    mode = meta.get("shell_network")
    return mode if mode in MODES else "ask"


def allowed_hosts(meta: SessionMeta) -> list[str]:
    return list(meta.get("shell_network_hosts") or ())


class CommandNetwork:
    """The consent asked for one shell call's requests (on the event loop): one question
    per host at a time, and a host refused in this command is not asked again in it."""

    def __init__(self, braid: Services, ctx: TurnContext, call_id: str) -> None:
        self.braid, self.ctx, self.call_id = braid, ctx, call_id
        self.decided: dict[str, str | None] = {}  # host -> None (allowed) or why not
        self.asking: dict[str, asyncio.Future[str | None]] = {}
        self.count = itertools.count(1)

    def mode(self) -> str:
        return mode_of(self.braid.store.get(self.ctx.handle.session_id).meta)

    async def consent(self, host: str, port: int) -> str | None:
        """None: the request may go; else why not (the proxy's 403 says it)."""
        meta = self.braid.store.get(self.ctx.handle.session_id).meta
        mode = mode_of(meta)
        if mode == "off":
            return "this session's network is off (shell_network)"
        if mode == "on" or host in allowed_hosts(meta):
            return None
        if host in self.decided:
            return self.decided[host]
        if host not in self.asking:
            self.asking[host] = asyncio.ensure_future(self._ask(host, port))
        return await asyncio.shield(self.asking[host])

    async def _ask(self, host: str, port: int) -> str | None:
        call_id = f"{self.call_id}-net{next(self.count)}"
        try:
            decision, reason = await approvals.ask_network(self.braid, self.ctx, call_id,
                                                           host, port)
        finally:
            self.asking.pop(host, None)
        why = None if decision != "deny" else (
            f"the user did not allow {host}" + (f": {reason}" if reason.strip() else ""))
        self.decided[host] = why
        return why

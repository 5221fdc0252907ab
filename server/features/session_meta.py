"""Rename, archive, set the model of, and delete a session (DESIGN §4 "Sessions").

`update_session` keeps the fields in `session.json`, committed (`user-edit`) on every branch
the user can show, so whichever branch is checked out (now or after a restart) names the
session the same way; sub-agent branches are left alone (their worktrees may be live).
`delete_session` is the one operation that destroys: the folder is first renamed out of the
store (the atomic point of deletion), then the index rows and the files go; a server killed
in between finishes the job at its next start (`purge_deleted`)."""

from __future__ import annotations

import asyncio
import shutil
from typing import TYPE_CHECKING, cast

from server.agent import approvals, network
from server.agent.mcp_servers.config import split_name
from server.base import events, names
from server.base.errors import Conflict, NotFound
from server.base.ids import is_session_id, now_iso
from server.base.records import SessionMeta, to_json_bytes
from server.base.results import ApprovalResult, SessionChanges, SessionInfo, ToolInfo, ToolList
from server.git import lookup
from server.git.branches import is_sub
from server.git.session import GitSession
from server.git.workdir.scan import WORKDIR
from server.store import session_settings

if TYPE_CHECKING:
    from server.agent.services import Services
    from server.store.session_store import SessionHandle

MAX_TITLE = names.MAX_TITLE
MAX_MODEL = 200
DELETED_PREFIX = ".deleted-"
READS = frozenset({"read_file", "list_files"})  # the built-in tools that change nothing


def _summary(changes: SessionChanges) -> str:
    parts = []
    if "title" in changes:
        parts.append(f"Rename session: {changes['title']}")
    if "archived" in changes:
        parts.append("Archive session" if changes["archived"] else "Restore session")
    if "model" in changes:
        parts.append(f"Model: {changes['model'] or 'default'}")
    if "approvals" in changes:
        parts.append(f"Approvals: {changes['approvals']}")
    if "shell_network_hosts" in changes:
        parts.append(f"Network hosts: {', '.join(changes['shell_network_hosts']) or 'none'}")
    if "shell_network" in changes:
        parts.append(f"Shell network: {changes['shell_network']}")
    if "approvals_always" in changes:
        parts.append(f"Always allow: {', '.join(changes['approvals_always']) or 'none'}")
    if "tools_off" in changes:
        parts.append(f"Tools off: {', '.join(changes['tools_off']) or 'none'}")
    return "; ".join(parts)


def write_meta(git: GitSession, meta: SessionMeta, summary: str) -> None:
    """Commit `session.json` on each branch whose copy differs (not on sub-agent branches)."""
    session_settings.save(git.path, meta)  # the session's, whatever branch is shown
    data = to_json_bytes(meta)
    for branch, tip in sorted(git.branches().items()):
        if is_sub(branch):
            continue
        commit = git.commit(tip)
        found = lookup.entry(commit.tree, "session.json")  # not `tree[name]`: it leaks
        if found is not None and lookup.blob_data(git.repo, found.id) == data:
            continue
        git.commit_on_branch(branch, {"session.json": data}, summary=summary, kind="user-edit")


# A change to its default value is kept as no key (`auto`, `ask`, no list, not archived,
# the server's model); the title is always kept.
DEFAULTS: dict[str, object] = {"archived": False, "model": None, "approvals": "auto",
                               "approvals_always": [], "shell_network": "ask",
                               "shell_network_hosts": [], "tools_off": []}


def _changed(meta: SessionMeta, changes: SessionChanges) -> SessionMeta:
    """`meta` with `changes`: an absent key means the default model, not archived."""
    out = meta.copy()
    kept = cast("dict[str, object]", out)
    for key, value in changes.items():
        if key != "title" and value == DEFAULTS.get(key):
            kept.pop(key, None)
        else:
            kept[key] = value
    return out


async def update_session(braid: Services, user_id: str, session_id: str,
                         changes: SessionChanges) -> SessionInfo:
    """Apply `changes` {title?: str, archived?: bool, model?: str | None (the default)};
    returns the session as `GET /api/sessions/{id}`."""
    from server.features.sessions import session_info

    handle = braid.store.get_owned(user_id, session_id)
    if changes.get("model"):
        from server.agent.turns import own_endpoints
        from server.features.model_choice import check_model

        # names an endpoint Braid knows, or one of the user's own
        check_model(braid, changes["model"], await own_endpoints(braid, user_id))
    if changes:
        meta = _changed(handle.meta, changes)
        if meta != handle.meta:
            # A first turn still to commit holds the session.json it titled: it must not
            # put the old name back. Its state belongs to the loop, so it is changed here,
            # before the commit is queued: any checkpoint the turn takes from now on holds
            # the new session.json, and one queued earlier is committed before this one.
            for active in braid.runs.for_session(handle.session_id):
                if active.ctx is not None and "session.json" in active.ctx.pending:
                    active.ctx.pending["session.json"] = to_json_bytes(meta)
            await handle.call(lambda git: write_meta(git, meta, _summary(changes)))
            kept = cast("dict[str, object]", handle.meta)  # the same object: others hold it
            kept.clear()
            kept.update(meta)
            await braid.index.upsert_session(handle.meta, now_iso())
            braid.bus.publish(handle.session_id, events.session_updated(sorted(changes)))
    return await session_info(braid, user_id, handle.session_id)


async def list_tools(braid: Services, user_id: str, session_id: str) -> ToolList:
    """The tools the session's model may be offered, each with whether it is switched off
    (`tools_off`) and what its definition costs of the context budget; and the configured
    MCP servers whose tools are not offered, with why."""
    from server.agent.compaction.request import definition_cost
    from server.agent.turns import session_tools

    handle = braid.store.get_owned(user_id, session_id)
    off = set(handle.meta.get("tools_off") or ())
    out: list[ToolInfo] = []
    for tool in await session_tools(braid, handle.session_id, handle.path / WORKDIR,
                                    handle.user_id):
        name = tool["function"]["name"]
        server = split_name(name)
        out.append({"name": name, "server": server[0] if server else None,
                    "description": tool["function"].get("description") or "",
                    "read_only": braid.mcp.read_only(name, handle.session_id) if server
                    else name in READS,
                    "off": name in off, "tokens": definition_cost(tool)})
    return {"tools": out, "unavailable": braid.mcp.why_not(handle.session_id)}


async def approve_tool_call(braid: Services, user_id: str, session_id: str, run_id: str,
                            call_id: str, decision: str, reason: str = "") -> ApprovalResult:
    """Answer a tool call waiting for approval (DESIGN §4 "Approvals"): `approve` runs it,
    `deny` gives the model `denied by the user: <reason>`, `always` runs it and lets that
    tool run unasked for the rest of the session. A run another process drives (a team
    server) gets the answer through it (`team.send_approval`)."""
    handle = braid.store.get_owned(user_id, session_id)
    given = braid.runs.answered(handle.session_id, run_id, call_id)
    if given is not None:
        raise Conflict(f"tool call {call_id!r} of run {run_id} was already answered: {given}")
    active = braid.runs.find(handle.session_id, run_id)
    if active is None or call_id not in active.waiting:
        raise NotFound(f"no tool call {call_id!r} of run {run_id} is waiting for approval")
    # The one answer, taken before any await: two answers at once cannot both pass.
    if not braid.runs.mark_answered(handle.session_id, run_id, call_id, decision):
        raise Conflict(f"tool call {call_id!r} of run {run_id} was already answered")
    if call_id in active.answers:  # this process drives the run
        if not await settle(braid, handle.session_id, run_id, call_id, decision, reason):
            raise Conflict(f"tool call {call_id!r} of run {run_id} was already answered")
    elif braid.team is not None:
        await braid.team.send_approval(handle.session_id, run_id, call_id, decision, reason)
    else:
        raise NotFound(f"no tool call {call_id!r} of run {run_id} is waiting for approval")
    return {"run_id": run_id, "call_id": call_id, "decision": decision}


async def settle(braid: Services, session_id: str, run_id: str, call_id: str, decision: str,
                 reason: str) -> bool:
    """On the process driving the run: `always` kept in session.json first (the tool's next
    call reads it), then the waiting call answered. False if it was not waiting here."""
    active = braid.runs.find(session_id, run_id)
    waiting = active.waiting.get(call_id) if active is not None else None
    if active is None or waiting is None or call_id not in active.answers:
        return False
    if waiting["tool"] == network.TOOL and decision != "deny":
        # A host allowed once is allowed for the session (approve and always alike).
        handle = braid.store.get(session_id)
        args = waiting["args"]
        host = str(args.get("host")) if isinstance(args, dict) else ""
        hosts = sorted({*network.allowed_hosts(handle.meta), host} - {""})
        await update_session(braid, handle.user_id, session_id, {"shell_network_hosts": hosts})
    elif decision == "always":
        handle = braid.store.get(session_id)
        always = sorted({*(handle.meta.get("approvals_always") or ()), waiting["tool"]})
        await update_session(braid, handle.user_id, session_id, {"approvals_always": always})
    return approvals.answer(active, call_id, decision, reason)


async def delete_session(braid: Services, user_id: str, session_id: str) -> None:
    """Stop its runs, then remove the session folder and its index rows."""
    handle = braid.store.get_owned(user_id, session_id)
    # Its queue first: a run stopped here must not start the next queued message.
    await braid.queue.delete_session(handle.session_id)
    for active in braid.runs.for_session(handle.session_id):
        active.stop("cancel")
    for active in braid.runs.for_session(handle.session_id):
        await active.done.wait()
    await braid.mcp.stop_session(handle.session_id)  # its MCP servers go with it
    braid.bus.publish(handle.session_id, events.session_deleted())
    await _drop(braid, handle)


async def _drop(braid: Services, handle: SessionHandle) -> None:
    sid = handle.session_id
    braid.store.forget(sid)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, handle.close)  # waits for git work queued before
    trash = braid.store.root / f"{DELETED_PREFIX}{sid}"
    await loop.run_in_executor(None, handle.path.rename, trash)
    await forget_rows(braid, sid)
    await loop.run_in_executor(None, lambda: shutil.rmtree(trash, ignore_errors=True))


async def forget_rows(braid: Services, session_id: str) -> None:
    """A session's index and search rows, gone with its folder."""
    await braid.index.delete_session(session_id)
    await braid.search.delete_session(session_id)


async def purge_deleted(braid: Services) -> int:
    """At start-up: finish deletions a killed server left half done."""
    count = 0
    for path in braid.store.root.glob(f"{DELETED_PREFIX}*"):
        sid = path.name[len(DELETED_PREFIX):]
        if is_session_id(sid):
            await forget_rows(braid, sid)
        shutil.rmtree(path, ignore_errors=True)
        count += 1
    return count

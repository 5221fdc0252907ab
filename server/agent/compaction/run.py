"""Compaction as a run (DESIGN §4 "Compaction").

When a turn opens on a branch whose messages no longer fit even masked, it first compacts:
the model is asked to summarize the oldest part (request.py), and the answer is a
`compaction` run of its own on the branch (one commit, `Braid-Kind: compaction`, holding its
summary message and its record), at the seq the turn kept free before its own message. A
kill before that commit leaves the branch as before; a failed call leaves the turn with the
old cut (oldest left out with a note) and a warning on its record, never a failed run.
`compact` does it on demand.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

from server.agent.compaction import instructions
from server.agent.compaction.instructions import Instructions
from server.agent.compaction.request import (
    SYSTEM_PROMPT,
    Plan,
    Request,
    heads_of,
    parts_of,
    plan,
    summary_request,
)
from server.agent.live_runs import claim_turn
from server.agent.turn_context import branch_prior
from server.base import crash, events
from server.base.errors import Conflict
from server.base.ids import new_message_id, now_iso
from server.base.records import (
    MessageRecord,
    RunRecord,
    Usage,
    new_message,
    new_run,
    to_json_bytes,
)
from server.base.results import InstructionsShown, RunStarted
from server.git.session import GitSession
from server.model.endpoints import user_endpoints
from server.store import context, journal, layout
from server.store.locks import on_branch
from server.store.users import off_loop

if TYPE_CHECKING:
    from server.agent.services import Services
    from server.agent.turn_context import TurnContext
    from server.store.session_store import SessionHandle

log = logging.getLogger("braid")


def add_usage(total: Usage, usage: Usage | None) -> None:
    """The tokens of each summary call, summed on the compaction's record."""
    if usage and "prompt_tokens" in usage:
        total["prompt_tokens"] = total.get("prompt_tokens", 0) + int(usage["prompt_tokens"])
    if usage and "completion_tokens" in usage:
        total["completion_tokens"] = (total.get("completion_tokens", 0)
                                      + int(usage["completion_tokens"]))


async def summarize(braid: Services, handle: SessionHandle, request: Request,
                    model: str | None, endpoint: str | None) -> tuple[str, Usage | None]:
    """The model's summary (its text, its usage). Raises what the call raised."""
    crash.at("compaction.model")
    own = user_endpoints(await off_loop(braid.users).connections(handle.user_id))
    stream = braid.model.stream(request.messages, [], model=model, endpoint=endpoint, own=own)
    reply = None
    async with contextlib.aclosing(stream):
        async for kind, value in stream:
            if kind == "reply":
                reply = value
    if reply is None or not (reply.content or "").strip():
        raise RuntimeError("the model answered the summary request with nothing")
    return str(reply.content).strip(), reply.usage


def write_compaction(git: GitSession, record: RunRecord, msg: MessageRecord,
                     seq: int | None) -> str:
    """On the session thread: the compaction run's one commit (its summary message at
    `seq`, kept free by a turn, or the next, on demand; and its record)."""
    at = layout.next_seq(git) if seq is None else seq
    msg_path = layout.message_path(git, at, "system", msg["id"])
    run_path = layout.new_run_path(git, str(record["run_id"]))
    covers = msg.get("covers")
    turns = covers["turns"] if covers else 0
    word = "turn" if turns == 1 else "turns"
    changes = {msg_path: to_json_bytes(msg), run_path: to_json_bytes(record)}
    # Journaled: a kill between the index's entries and the commit is settled at the next
    # start (the index put back in line with the branch), like any operation's.
    with journal.intent(git, context.COMPACTION, changes):
        oid = git.write_checkpoint(
            changes, summary=f"Compaction: {turns} earlier {word} summarized",
            kind=context.COMPACTION, run_id=str(record["run_id"]), message_index=1,
            # In a turn the index waits for the turn's end; on demand nothing else would.
            sync_index=seq is None)
    return str(oid)


async def run_compaction(braid: Services, handle: SessionHandle, branch: str,
                         found: Plan, heads: list[str], model: tuple[str | None, str | None],
                         seq: int | None) -> tuple[RunRecord, MessageRecord]:
    """Summarize `found` and commit the compaction run; its events go to every tab."""
    run_id = new_message_id()
    record: RunRecord = {**new_run(run_id, handle.session_id, branch), "kind": context.COMPACTION,
                         "covers": found.covers}
    record["model"], record["endpoint"] = model[0], model[1] or ""
    budget = braid.settings.context_tokens
    sid = handle.session_id
    braid.bus.publish(sid, events.run_started(run_id, record.copy(), branch, [], None,
                                              titled=False))
    earlier = found.previous.get("content") if found.previous is not None else None
    usage: Usage = {}
    try:
        for start, end in parts_of(found.covered, heads, budget):
            request = summary_request(earlier, found.covered[start:end], heads, budget)
            record["context"] = request.use
            earlier, used = await summarize(braid, handle, request, model[0], model[1])
            add_usage(usage, used)
        text = earlier or ""
    except BaseException as e:
        braid.bus.publish(sid, events.run_ended("ERROR", run_id, record.copy(), [],
                                                error=str(e) or type(e).__name__))
        raise
    msg = new_message("system", run_id, text, kind=context.COMPACTION, covers=found.covers)
    msg["id"] = run_id  # a run's id is its first message's
    record.update({"status": "COMPLETED", "summary": text, "message_count": 1,
                   "updated_at": now_iso()})
    record["usage"] = usage
    commit_id = await handle.call(lambda git: write_compaction(git, record, msg, seq))
    braid.bus.publish(sid, events.checkpoint(run_id, commit_id, context.COMPACTION))
    await braid.index.upsert_run(sid, record)
    braid.bus.publish(sid, events.run_ended("COMPLETED", run_id, record.copy(), [msg.copy()]))
    braid.bus.publish(sid, events.dag_changed(run_id=run_id))
    return record, msg


async def compact_in_turn(braid: Services, ctx: TurnContext, heads: list[str]) -> None:
    """A turn's compaction before its first call, at the seq the turn kept free. A failed
    call (or anything else but a stop) leaves the turn to the old cut, with a warning."""
    if ctx.compaction is None or ctx.prior_sums is None:
        return
    seq, keep = ctx.compaction
    ctx.compaction = None
    found = plan(ctx.prior, ctx.prior_sums, keep)
    if found is None:
        return
    handle = ctx.handle
    try:
        await run_compaction(braid, handle, str(ctx.run.get("branch")), found, heads,
                             (ctx.run.get("model"), ctx.run.get("endpoint")), seq)
    except Exception as e:  # noqa: BLE001 - the turn goes on with the old cut
        log.warning("the compaction before run %s failed: %s", ctx.run_id, e)
        ctx.run["warning"] = ("the earlier conversation could not be summarized "
                              f"({getattr(e, 'message', None) or e}); its oldest messages "
                              "were left out instead")
        return

    ctx.prior, ctx.prior_sums = await handle.call(branch_prior)


async def compact(braid: Services, user_id: str, session_id: str) -> RunStarted:
    """`compact`: summarize the shown branch's older runs now (all but the newest); returns
    the compaction run's id once it is committed (its events went to every tab)."""
    handle = braid.store.get_owned(user_id, session_id)
    branch = await handle.call(lambda git: git.branch)
    async with claim_turn(braid.locks, braid.runs, handle.session_id, branch) as active:
        def look(git: GitSession) -> tuple[Plan | None, Instructions]:
            return plan(layout.messages(git), layout.window_sums(git), None), \
                instructions.project(git)

        found, found_instructions = await handle.call(on_branch(branch, look))
        if found is None:
            raise Conflict("nothing to compact: the branch has no earlier turns to summarize")
        heads = heads_of(SYSTEM_PROMPT, found_instructions, braid.settings.instructions_file)
        own = user_endpoints(await off_loop(braid.users).connections(handle.user_id))
        endpoint, model = braid.model.resolve(handle.meta.get("model"),
                                              handle.meta.get("endpoint"), own)
        record, _ = await run_compaction(braid, handle, branch, found, heads,
                                         (model, endpoint.name), None)
        active.run_id = str(record["run_id"])
        # The claim is let go here (a raise above lets claim_turn free it): the branch is
        # free for the next turn or a queued message.
        await braid.runs.end(active)
    braid.packer.touch(handle.session_id, handle.path)
    return {"run_id": str(record["run_id"])}


async def instructions_in_effect(braid: Services, user_id: str, session_id: str
                                 ) -> InstructionsShown:
    """What the page's instructions chip shows: the shown branch's AGENTS.md (its size, or
    0: none) and whether the operator's file is in effect."""
    handle = braid.store.get_owned(user_id, session_id)
    found = await handle.call(instructions.project)
    return {"path": instructions.FILE_NAME if found.blob_oid else None, "size": found.size,
            "cut": found.cut,
            "server": instructions.server_text(braid.settings.instructions_file) is not None}

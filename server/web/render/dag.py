"""The DAG panel's web side: its HTTP partials (the graph, one node) and the socket renderers
for sub-agents, merges, `dag_changed` and a sub-agent's checkpoints (its lane grows). A
sub-agent's run streams into its card in its parent's bubble, never into the transcript."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from server.base.errors import BraidError, ErrorInfo, NotFound
from server.base.results import ChildCard, MergeResult, RemovedBranch, TranscriptItem
from server.features import dag, sessions
from server.web import params
from server.web.auth import user_of
from server.web.render import dag_layout
from server.web.render.dag_layout import node_kind
from server.web.render.fragments import (
    ErrorRenderer,
    Renderer,
    ResultRenderer,
    View,
    oob_append,
    run_state,
)
from server.web.render.names import branch_label, load_names
from server.web.render.templating import dom_id, env, render
from server.web.render.turn_view import card_of_run


def short_branch(name: object) -> str:
    """A branch's readable name ("sub-agent alpha", "Edit of message 3"); hash on hover."""
    return branch_label(name)


env.filters["short_branch"] = short_branch
env.globals["node_kind"] = node_kind


def dag_html(layout: dag_layout.Layout, session_id: str) -> str:
    """The graph, and (out of band: outside the merge form, forms do not nest) the list of
    the sub-agents' branches with their Remove buttons, drawn from the same branches."""
    subs = [b for b in layout.branches if b.get("sub_agent")]
    return render("_dag.html", dag=layout, session_id=session_id, row_h=dag_layout.ROW_H) + \
        render("_sub_branches.html", branches=subs, oob=True)


async def load_layout(braid: Any, user_id: str, session_id: str,
                      rows: object = None) -> dag_layout.Layout:
    """The graph the core publishes, laid out as the panel draws it."""
    count = dag_layout.clamp_rows(rows)
    return dag_layout.layout(await dag.get_dag(braid, user_id, session_id), count)


async def dag_fragment(request: Request) -> Response:
    braid = request.app.state.braid
    user_id = user_of(request)
    session_id = request.path_params["session_id"]
    try:
        braid.store.get_owned(user_id, session_id)
        await load_names(braid, session_id)
        layout = await load_layout(braid, user_id, session_id,
                                   request.query_params.get("rows"))
    except BraidError as e:
        return HTMLResponse(render("_toast.html", message=e.message, level="error"),
                            status_code=404 if e.code == "not_found" else 400)
    return HTMLResponse(dag_html(layout, session_id))


async def _node_commit(braid: Any, user_id: str, request: Request) -> str:
    """The node asked for: a commit id, or `tip` with `?branch=` (a sub-agent card's
    Transcript: its branch's newest commit, whichever it is when clicked)."""
    if request.path_params["commit_id"] != "tip":
        return params.full_commit_id(request.path_params["commit_id"])
    branch = request.query_params.get("branch") or ""
    info = await sessions.session_info(braid, user_id, request.path_params["session_id"],
                                       runs=False)
    head = next((b["head"] for b in info["branches"] if b["name"] == branch), None)
    if head is None:
        raise NotFound(f"no branch {branch}")
    return head


async def node_fragment(request: Request) -> Response:
    from server.web.actions import ACTIONS

    braid = request.app.state.braid
    user_id = user_of(request)
    try:
        commit_id = await _node_commit(braid, user_id, request)
        braid.store.get_owned(user_id, request.path_params["session_id"])
        await load_names(braid, request.path_params["session_id"])
        node = await dag.get_node(braid, user_id, request.path_params["session_id"], commit_id)
    except BraidError as e:
        return HTMLResponse(render("_toast.html", message=e.message, level="error"),
                            status_code=404 if e.code == "not_found" else 400)
    # Without continue_run, "Continue from here" shows the commit's branch.
    hint = request.query_params.get("branch")
    checkout = hint if hint in node["branches"] else \
        next(iter(node["tips"] or node["branches"]), None)
    return HTMLResponse(render("_dag_node.html", node=node, checkout_branch=checkout,
                               can_continue="continue_run" in ACTIONS))


# -- socket renderers --------------------------------------------------------------------


def dag_changed(v: View) -> str:
    return dag_html(v.reads["layout"], v.data["session_id"])


def sub_agent_started(v: View) -> str:
    """The child's card, appended to its parent's bubble (the user's spawn names the turn
    as `parent_turn_id`, the model's as `parent_run_id` with its `call_id`)."""
    data = v.data
    parent = str(data.get("parent_run_id") or data.get("parent_turn_id") or "")
    card: ChildCard = {"run_id": data["run_id"], "parent_run_id": parent,
                       "call_id": str(data.get("call_id") or "") or None,
                       "branch": data.get("branch") or "",
                       "label": data.get("label") or "", "status": "RUNNING",
                       "prompt": data.get("prompt") or ""}
    html = render("_sub_agent_card.html", card=card)
    return oob_append(f"children-{dom_id(parent)}", html, turn_part=True) + run_state(v.running)


def child_ended(v: View) -> str:
    """A child's own end event: its card in the parent's bubble, with status, answer, files
    and tokens (its run record's)."""
    card = card_of_run(v.data.get("run") or {}, v.data.get("messages") or [],
                       files=list(v.data.get("files") or []))
    card["run_id"] = v.data["run_id"]
    return render("_sub_agent_card.html", card=card) + run_state(v.running)


def sub_agent_done(v: View) -> str:
    """The result message joins the parent's transcript (its card was redrawn by the
    child's own end event)."""
    data = v.data
    html = ""
    summary = data.get("summary")
    # The result joins the parent's transcript only where the page shows that branch.
    if summary and data.get("shown_branch") == data.get("parent_branch"):
        turns = sessions.build_turns([summary["message"]], {summary["run_id"]: summary["run"]})
        # Its chips: the files the child changed (as the transcript gives them).
        turn: TranscriptItem = {**turns[0], "streaming": False,
                                "files": list(data.get("files") or [])}
        html += f'<div id="transcript" hx-swap-oob="beforeend">{render("_turn.html", turn=turn)}' \
                f'</div>'
    return html + run_state(v.running)


def lane_grew(v: View) -> str:
    """A sub-agent's checkpoint: the graph redrawn with its lane grown (only a sub-agent's
    reach here: events.grows_lane)."""
    layout = v.reads.get("layout")
    return dag_html(layout, v.data["session_id"]) if layout is not None else ""


def merged(v: View) -> str:
    return '<div id="dag-conflicts" hx-swap-oob="true"></div>'


async def no_html(r: Renderer, data: object) -> str:
    return ""  # the events already drew it


async def merge_error(r: Renderer, error: ErrorInfo) -> str:
    conflicts = (error.get("details") or {}).get("conflicts")
    if error.get("code") != "conflict" or not conflicts:
        return r.toast(error["message"])
    # One editor per file: the last branch's conflict on it (its `ours` holds the earlier).
    files = list({c["path"]: c for c in conflicts}.values())
    box = render("_dag_conflicts.html", files=files)
    return box.replace('id="dag-conflicts"', 'id="dag-conflicts" hx-swap-oob="true"', 1) + \
        r.toast(error["message"])


async def merge_done(r: Renderer, data: MergeResult) -> str:
    # Tells this tab's merge form to clear its ticks and message (kept while refused).
    return '<span id="merge-ack" hidden data-state="merged"></span>'


async def branch_removed(r: Renderer, data: RemovedBranch) -> str:
    # The graph and the list are redrawn by dag_changed; this says what went.
    runs = len(data["run_ids"])
    return r.toast(f"Removed {short_branch(data['branch'])}"
                   f"{f' and its {runs} run' + ('s' if runs != 1 else '') if runs else ''}.",
                   level="info")


DAG_RESULTS: dict[str, ResultRenderer] = {"spawn_sub_agent": no_html, "merge_branches": merge_done,
                                          "remove_sub_branch": branch_removed}
# Error renderers take the frame's `error` object: {code, message, details?}.
DAG_ERRORS: dict[str, ErrorRenderer] = {"merge_branches": merge_error}

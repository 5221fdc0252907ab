"""The DAG panel's web side: its HTTP partials (the graph, one node) and the socket renderers
for sub-agents, merges and `dag_changed`. Sub-agent runs stream into their card in the panel,
never into the parent's transcript."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from server.base.errors import BraidError, ErrorInfo
from server.base.results import MergeResult, TranscriptItem
from server.features import dag, sessions
from server.features.subagents import PREFIX
from server.web import params
from server.web.auth import user_of
from server.web.render import dag_layout
from server.web.render.dag_layout import node_kind
from server.web.render.fragments import (
    ErrorRenderer,
    EventRenderer,
    Renderer,
    ResultRenderer,
    View,
    run_state,
)
from server.web.render.names import branch_label, load_names
from server.web.render.templating import env, render


def short_branch(name: object) -> str:
    """A branch's readable name ("sub-agent alpha", "Edit of message 3"); hash on hover."""
    return branch_label(name)


env.filters["short_branch"] = short_branch
env.globals["node_kind"] = node_kind


def dag_html(layout: dag_layout.Layout, session_id: str) -> str:
    return render("_dag.html", dag=layout, session_id=session_id, row_h=dag_layout.ROW_H)


async def load_layout(braid: Any, user_id: str, session_id: str,
                      rows: object = None) -> dag_layout.Layout:
    """The graph the core publishes, laid out as the panel draws it."""
    count = dag_layout.clamp_rows(rows)
    return dag_layout.layout(await dag.get_dag(braid, user_id, session_id), count)


def sub_cards(braid: Any, session_id: str) -> str:
    """Cards for the sub-agents running now (a page load or a reconnect)."""
    cards = []
    for active in braid.runs.for_session(session_id):
        if active.branch.startswith(PREFIX) and active.run_id:
            cards.append(render("_sub_agent_card.html", run_id=active.run_id,
                                branch=active.branch, label=short_branch(active.branch),
                                prompt="", status="RUNNING", final_text=""))
    return f'<div id="sub-agents" class="sub-agents" aria-live="polite" hx-swap-oob="true">' \
           f'{"".join(cards)}</div>'


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
    html = dag_html(layout, session_id)
    if request.query_params.get("cards"):  # a page load or a reconnect: live cards too
        html += sub_cards(braid, session_id)
    return HTMLResponse(html)


async def node_fragment(request: Request) -> Response:
    from server.web.actions import ACTIONS

    braid = request.app.state.braid
    user_id = user_of(request)
    try:
        commit_id = params.full_commit_id(request.path_params["commit_id"])
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
    data = v.data
    card = render("_sub_agent_card.html", run_id=data["run_id"], branch=data["branch"],
                  label=data.get("label"), prompt=data.get("prompt"), status="RUNNING",
                  final_text="")
    return f'<div id="sub-agents" hx-swap-oob="beforeend">{card}</div>' + run_state(v.running)


def sub_agent_done(v: View) -> str:
    data = v.data
    html = render("_sub_agent_card.html", run_id=data["run_id"], branch=data["branch"],
                  label=data.get("label"), prompt="", status=data.get("status") or "",
                  final_text=data.get("final_text"))
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


DAG_EVENTS: dict[str, EventRenderer] = {
    "dag_changed": dag_changed,
    "sub_agent_started": sub_agent_started,
    "sub_agent_done": sub_agent_done,
    "merged": merged,
}


async def merge_done(r: Renderer, data: MergeResult) -> str:
    # Tells this tab's merge form to clear its ticks and message (kept while refused).
    return '<span id="merge-ack" hidden data-state="merged"></span>'


DAG_RESULTS: dict[str, ResultRenderer] = {"spawn_sub_agent": no_html, "merge_branches": merge_done}
# Error renderers take the frame's `error` object: {code, message, details?}.
DAG_ERRORS: dict[str, ErrorRenderer] = {"merge_branches": merge_error}

"""Every action, declared once (DESIGN §5): its name, typed parameters, the core function it
calls and its HTTP route. The socket's `ACTIONS` table and the HTTP API's routes are both
made from `SPECS` (specs.py), so the two transports cannot drift apart. Adding an action is
one entry here plus one core function taking typed arguments (docs/DESIGN.md shows how)."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from server.agent import turns
from server.agent.compaction import run as compaction
from server.app.braid import Braid
from server.base.results import ModelList, SessionList
from server.features import (
    dag,
    files,
    fork,
    merge,
    model_choice,
    queue,
    revert,
    search,
    session_meta,
    sessions,
    subagents,
    timetravel,
)
from server.features.connections import own as own_connections
from server.features.sources import exporting, sync
from server.store.search import MAX_QUERY
from server.web import params as P
from server.web.file_actions import file_or_folder, zip_download
from server.web.specs import Action, Handler, Http, Param, socket_table

__all__ = ["ACTIONS", "SPECS", "by_name"]

TURN = Param("turn_id", P.message_id("turn_id", "turn"), aliases=("assistant_msg_id",))
QUEUED = Param("queued_id", P.message_id("queued_id", "queued message"))
RUN = Param("run_id", P.message_id("run_id", "run"), aliases=("assistant_msg_id",))


async def sessions_of(braid: Braid, user_id: str, query: str, archived: bool) -> SessionList:
    return {"sessions": await sessions.list_sessions(braid, user_id, query, archived)}


async def models(braid: Braid, user_id: str) -> ModelList:
    return await model_choice.list_models(braid, user_id)


def no_content(result: Any, status: int) -> Response:
    return Response(status_code=204)


def archived_flag(value: object) -> bool:
    return value in ("1", "true")


SPECS: list[Action] = [
    # -- turns ------------------------------------------------------------------------------
    Action("send_message", queue.send, (Param("text", P.text("text"), http_name="input"),
                                        Param("queue", P.form_flag("queue"))),
           Http("POST", "/api/sessions/{session_id}/runs", call=queue.send_to_end)),
    Action("cancel_run", turns.cancel_run, (Param("run_id", P.optional_run_id),)),
    Action("checkout", sessions.checkout, (Param("ref", P.branch_name),)),
    Action("compact", compaction.compact, (),
           Http("POST", "/api/sessions/{session_id}/compact")),
    # -- the queue (messages sent while the branch was busy) --------------------------------
    Action("list_queue", queue.list_queue, (), Http("GET", "/api/sessions/{session_id}/queue")),
    Action("update_queued", queue.update_queued, (QUEUED, Param("text", P.text("text"))),
           Http("PATCH", "/api/sessions/{session_id}/queue/{queued_id}")),
    Action("cancel_queued", queue.cancel_queued, (QUEUED,),
           Http("DELETE", "/api/sessions/{session_id}/queue/{queued_id}")),
    # -- reverting a turn -------------------------------------------------------------------
    Action("list_turn_files", revert.list_turn_files, (TURN,),
           Http("GET", "/api/turns/{turn_id}/files")),
    Action("turn_diff", revert.turn_diff, (TURN, Param("path", P.optional_path)),
           Http("GET", "/api/turns/{turn_id}/diff")),
    Action("revert_turn", revert.revert_turn, (TURN, Param("force", P.form_flag("force")),
                                               Param("paths", P.turn_paths, many=True)),
           Http("POST", "/api/turns/{turn_id}/revert")),
    Action("unrevert_turn", revert.unrevert_turn, (TURN, Param("force", P.form_flag("force")),
                                                   Param("paths", P.turn_paths, many=True)),
           Http("POST", "/api/turns/{turn_id}/unrevert")),
    # -- sub-agents, merges, the DAG --------------------------------------------------------
    Action("spawn_sub_agent", subagents.spawn_sub_agent, (
        Param("parent_turn_id", P.message_id("parent_turn_id", "turn"),
              aliases=("parent_msg_id",)),
        Param("prompt", P.text("prompt")),
        Param("label", P.label),
    ), Http("POST", "/api/sessions/{session_id}/sub_agents")),
    Action("merge_branches", merge.merge_branches, (
        Param("branches", P.branch_list, many=True),
        Param("message", P.string("message")),
        Param("strategy", P.strategy),
        Param("resolutions", P.resolutions),
    ), Http("POST", "/api/sessions/{session_id}/merge")),
    Action("get_dag", dag.get_dag, (), Http("GET", "/api/sessions/{session_id}/dag")),
    # -- time travel ------------------------------------------------------------------------
    Action("continue_run", timetravel.continue_run, (
        RUN,
        Param("continue_from", P.continue_from),
        Param("input", P.text("input", required=False)),
        Param("fork", P.strict_flag("fork")),
        Param("regenerate", P.strict_flag("regenerate")),
        Param("replace_original", P.strict_flag("replace_original")),
        Param("keep_files", P.strict_flag("keep_files")),
    ), Http("POST", "/api/runs/{run_id}/continue", call=timetravel.continue_run_to_end)),
    Action("rewind_files", timetravel.rewind_files, (
        RUN, Param("message_index", P.message_index),
    ), Http("POST", "/api/runs/{run_id}/rewind_files")),
    Action("list_checkpoints", timetravel.list_checkpoints, (RUN,),
           Http("GET", "/api/runs/{run_id}/checkpoints")),
    Action("fork_session", fork.fork_session, (),
           Http("POST", "/api/sessions/{session_id}/fork", status=201)),
    # -- the session ------------------------------------------------------------------------
    Action("update_session", session_meta.update_session,
           (Param("changes", P.session_changes, whole=True),),
           Http("PATCH", "/api/sessions/{session_id}")),
    Action("export_session", exporting.export_session, (
        Param("to", P.export_target),
        Param("path", P.folder),
        Param("force", P.form_flag("force")),
    ), Http("POST", "/api/sessions/{session_id}/export")),
    Action("update_from_source", sync.update_from_source, (),
           Http("POST", "/api/sessions/{session_id}/update_from_source")),
    Action("approve_tool_call", session_meta.approve_tool_call, (
        RUN,
        Param("call_id", P.call_id),
        Param("decision", P.decision),
        Param("reason", P.string("reason", limit=2000)),
    ), Http("POST", "/api/runs/{run_id}/approve")),
    Action("list_tools", session_meta.list_tools, (),
           Http("GET", "/api/sessions/{session_id}/tools")),
    Action("list_files", files.list_files, (Param("ref", P.ref), Param("path", P.workdir_path))),
    # -- HTTP only --------------------------------------------------------------------------
    Action("create_session", sessions.create_session, (
        Param("title", P.string("title")),
        Param("source", P.source),
        Param("model", P.new_model),
    ), Http("POST", "/api/sessions", status=201), socket=False, session=False),
    Action("list_sessions", sessions_of, (
        Param("query", P.string("q"), http_name="q"),
        Param("archived", archived_flag),
    ), Http("GET", "/api/sessions"), socket=False, session=False),
    Action("get_session", sessions.session_info, (), Http("GET", "/api/sessions/{session_id}"),
           socket=False),
    Action("delete_session", session_meta.delete_session, (),
           Http("DELETE", "/api/sessions/{session_id}", respond=no_content), socket=False),
    Action("get_run", sessions.get_run, (RUN,), Http("GET", "/api/runs/{run_id}"),
           socket=False),
    Action("get_path", files.get_path, (Param("ref", P.ref), Param("path", P.workdir_path)),
           Http("GET", "/api/sessions/{session_id}/files", respond=file_or_folder),
           socket=False),
    Action("get_zip", files.get_zip, (Param("ref", P.ref),),
           Http("GET", "/api/sessions/{session_id}/workdir.zip", respond=zip_download),
           socket=False),
    Action("search", search.search, (
        Param("query", P.string("q", limit=MAX_QUERY), http_name="q"),
        Param("limit", P.search_limit),
    ), Http("GET", "/api/search"), socket=False, session=False),
    Action("list_models", models, (), Http("GET", "/api/models"), socket=False, session=False),
    # -- the user's own connections (model endpoints, HTTP MCP servers) ---------------------
    Action("list_connections", own_connections.list_connections, (),
           Http("GET", "/api/connections"), socket=False, session=False),
    Action("add_connection", own_connections.add_connection, (
        Param("kind", P.connection_kind),
        Param("name", P.connection_name),
        Param("url", P.connection_url),
        Param("key", P.secret),
        Param("headers", P.headers),
        Param("models", P.model_ids),
    ), Http("POST", "/api/connections", status=201), socket=False, session=False),
    Action("remove_connection", own_connections.remove_connection, (
        Param("kind", P.connection_kind), Param("name", P.connection_name),
    ), Http("DELETE", "/api/connections/{kind}/{name}"), socket=False, session=False),
]

ACTIONS: dict[str, Handler] = socket_table(SPECS)


def by_name(name: str) -> Action:
    return next(a for a in SPECS if a.name == name)

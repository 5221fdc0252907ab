"""Model choice per session (DESIGN §4, §5): the models every endpoint offers
(`GET /api/models`), the session's choice kept in `session.json` (`model`: an id, or
`id@endpoint`; absent = the server's default; written by session_meta.update_session, checked
here), and the tokens a branch's turns used."""

from __future__ import annotations

from typing import TYPE_CHECKING

from server.agent.turns import own_endpoints
from server.base.errors import BadRequest
from server.base.records import Usage
from server.base.results import ModelInUse, ModelList, UsageTotal
from server.store import layout

if TYPE_CHECKING:
    from server.agent.services import Services
    from server.model.endpoints import Endpoint
    from server.store.session_store import SessionHandle

MAX_MODEL = 200


def ref(model_id: str, endpoint: str) -> str:
    return model_id if endpoint == "demo" else f"{model_id}@{endpoint}"


async def list_models(braid: Services, user_id: str = "") -> ModelList:
    """The operator's endpoints' models, then those of the user's own endpoints (the ones
    listed when it was added; an own endpoint named as an operator's is not reached)."""
    rows = await braid.model.list_models()
    own = await own_endpoints(braid, user_id) if user_id else {}
    rows += [{"id": model_id, "endpoint": ep.name} for ep in own.values()
             if ep.name not in braid.model.endpoints for model_id in ep.models]
    for row in rows:
        if row["id"]:
            row["ref"] = ref(row["id"], row["endpoint"])
    ep, model = braid.model.resolve()
    return {"models": rows, "default": ref(model, ep.name)}


def current(braid: Services, handle: SessionHandle,
            own: dict[str, Endpoint] | None = None) -> ModelInUse:
    """The model the session's next turn uses (`own`: its owner's own endpoints)."""
    ep, model = braid.model.resolve(handle.meta.get("model"), handle.meta.get("endpoint"), own)
    return {"id": model, "endpoint": ep.name, "ref": ref(model, ep.name),
            "chosen": bool(handle.meta.get("model"))}


def check_model(braid: Services, value: object,
                own: dict[str, Endpoint] | None = None) -> str | None:
    """A model choice as `update_session` takes it; null or "" = the default. `own`: the
    user's own endpoints, which a choice may name too."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > MAX_MODEL or not value.strip() \
            or any(ord(c) < 32 for c in value):
        raise BadRequest(f"model must be a model id of at most {MAX_MODEL} characters")
    model_id, _, endpoint = value.rpartition("@")
    if model_id and endpoint not in braid.model.endpoints and endpoint not in (own or {}):
        raise BadRequest(f"no endpoint named {endpoint!r}")
    return value.strip()


def usage_total(usages: list[Usage]) -> UsageTotal:
    total: UsageTotal = {"prompt_tokens": 0, "completion_tokens": 0, "estimated": False}
    for usage in usages:
        total["prompt_tokens"] += int(usage.get("prompt_tokens") or 0)
        total["completion_tokens"] += int(usage.get("completion_tokens") or 0)
        total["estimated"] = total["estimated"] or bool(usage.get("estimated"))
    total["total_tokens"] = total["prompt_tokens"] + total["completion_tokens"]
    return total


async def session_usage(braid: Services, user_id: str, session_id: str) -> UsageTotal:
    """Tokens the turns on the branch shown used, all added up."""
    handle = braid.store.get_owned(user_id, session_id)
    usages = await handle.call(lambda git: layout.run_usages(git, git.head_commit()))
    return usage_total(usages)

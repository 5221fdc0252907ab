"""The model client: the real `openai` client against the embedded demo model or any
OpenAI-compatible endpoint (see endpoints.py), one client per endpoint. `openai` is imported
lazily: it alone costs ~0.8 s of start-up.

Every failure becomes a `ModelError` whose message names the server and the cause in words a
user understands; `BRAID_MODEL_TIMEOUT` bounds the wait for each chunk (and for the answer to
start), `BRAID_MODEL_RETRIES` how often a request that failed before streaming is retried.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator
from typing import Any

from server.base.errors import BadRequest, BraidError
from server.base.records import ModelEntry, ModelMessage, ToolSchema, ToolSpec
from server.base.settings import Settings, variable_of
from server.model import body as model_body
from server.model import reach
from server.model.endpoints import (
    DEFAULT,
    DEMO,
    TOOL_CHOICE_WORDS,
    Endpoint,
    bound_arguments,
    endpoints_from_settings,
)
from server.model.stream import Reply, StreamAssembler, StreamError, estimate_usage

__all__ = ["ModelClient", "ModelError"]

log = logging.getLogger("braid.model")
LIST_TTL = 30.0  # seconds a GET /v1/models answer is reused
LIST_TIMEOUT = 3.0  # seconds the picker waits for an endpoint's list


class ModelError(BraidError):
    code = "model_error"

    def __init__(self, message: str, partial: Reply | None = None) -> None:
        super().__init__(message)
        self.partial = partial


def _detail(e: Any) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:500]
        if isinstance(body.get("detail"), str | list):
            return str(body["detail"])[:500]
    response = getattr(e, "response", None)
    text = getattr(response, "text", "") if response is not None else ""
    return (str(text).strip() or getattr(e, "message", "") or str(e))[:500]


def _cause(e: BaseException) -> str:
    """The innermost reason of a connection failure ("[Errno 111] Connection refused")."""
    seen: BaseException | None = e
    reason = ""
    while seen is not None:
        text = str(seen).strip()
        if text and text not in ("Connection error.", "Request timed out."):
            reason = text
        seen = seen.__cause__ or seen.__context__
    return reason or type(e).__name__


def describe(e: BaseException, ep: Endpoint, model: str, timeout: float) -> str:
    """One sentence saying what went wrong, naming the server (never its key, nor any
    credential in its URL: the error goes to the page, the API, the history and the log)."""
    return ep.scrub(_describe(e, ep, model, timeout))


def _describe(e: BaseException, ep: Endpoint, model: str, timeout: float) -> str:
    import openai

    where = ep.where()
    if isinstance(e, ModelError):
        return e.message
    if isinstance(e, openai.APITimeoutError | TimeoutError):
        return (f"the model server at {where} sent nothing for {timeout:g} s "
                "(BRAID_MODEL_TIMEOUT); it may be overloaded or hung")
    if isinstance(e, openai.APIConnectionError):
        return f"could not reach the model server at {where}: {_cause(e)}"
    if isinstance(e, openai.APIStatusError):
        status, detail = e.status_code, _detail(e)
        if status == 401:
            key = f" (the key comes from {ep.api_key_env})" if ep.api_key_env else \
                " (set OPENAI_API_KEY)" if ep.name == DEFAULT else ""
            return f"the server at {where} refused the API key (401){key}: {detail}"
        if status == 403:
            return f"the server at {where} does not allow this request (403): {detail}"
        if status == 404:
            return (f"the server at {where} has no model named {model!r}, or the URL is not "
                    f"an OpenAI-compatible API (often a missing /v1) (404): {detail}")
        if status == 429:
            return (f"the server at {where} is limiting requests or the quota is used up "
                    f"(429); try again later: {detail}")
        if status >= 500:
            return f"the server at {where} failed while answering ({status}): {detail}"
        return f"the server at {where} refused the request ({status}): {detail}"
    return f"the model at {where} failed: {type(e).__name__}: {e}"


class ModelClient:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.model = settings.model  # the default model id
        self.endpoints: dict[str, Endpoint] = {e.name: e for e in endpoints_from_settings(
            settings)}
        self.default_endpoint = DEMO if settings.model == DEMO else DEFAULT
        # One client per endpoint: an operator's by its name, a user's own by its name, URL
        # and key (two users may name theirs alike; a user may change theirs).
        self._clients: dict[object, Any] = {}
        self._listed: dict[str, tuple[float, list[str], str | None]] = {}

    @property
    def timeout(self) -> float:
        return float(getattr(self.settings, "model_timeout", 120.0))

    @property
    def client(self) -> Any:
        return self.client_for(self.endpoints[self.default_endpoint])

    def client_for(self, ep: Endpoint) -> Any:
        name: object = (ep.name, ep.base_url, ep.api_key) if ep.own else ep.name
        if name not in self._clients:
            retries = int(getattr(self.settings, "model_retries", 2))
            if ep.is_demo:
                from server.model.demo import demo_client

                self._clients[name] = demo_client(max_retries=retries)
            else:
                import httpx2
                import openai

                base_url, query = ep.request_url()
                timeout = httpx2.Timeout(self.timeout, connect=min(self.timeout, 10.0))
                # A user's own endpoint: every connection under the URL rules, to the
                # address checked (the operator's endpoints are the operator's choice).
                http = httpx2.AsyncClient(timeout=timeout, transport=reach.pinned_transport(
                    self.settings.endpoint_hosts, "a model endpoint",
                    variable_of("endpoint_hosts"))) if ep.own else None
                self._clients[name] = openai.AsyncOpenAI(
                    base_url=base_url, default_query=query or None,
                    api_key=ep.key() or "unset", max_retries=retries, timeout=timeout,
                    http_client=http)
        return self._clients[name]

    def resolve(self, model: str | None = None, endpoint: str | None = None,
                own: dict[str, Endpoint] | None = None) -> tuple[Endpoint, str]:
        """The endpoint and model id a turn uses: the session's choice, else the default.
        A choice is a model id, or `id@endpoint` where two endpoints serve the same id.
        `own`: the session's owner's own endpoints (the operator's win a name both use)."""
        endpoints = {**own, **self.endpoints} if own else self.endpoints
        if model and "@" in model:
            model_id, _, name = model.rpartition("@")
            if name in endpoints:
                return self.resolve(model_id or None, name, own)
        if endpoint and endpoint in endpoints:
            ep = endpoints[endpoint]
            if ep.is_demo:
                return ep, DEMO
            return ep, model or (ep.models[0] if ep.models else self.model)
        if model == DEMO or (not model and self.default_endpoint == DEMO):
            return self.endpoints[DEMO], DEMO
        if model:
            for ep in endpoints.values():
                if model in ep.models or model in self._listed.get(ep.name, (0, [], None))[1]:
                    return ep, model
        ep = self.endpoints.get(self.default_endpoint) or self.endpoints[DEMO]
        return ep, (model or self.model) if not ep.is_demo else DEMO

    def _request(self, ep: Endpoint, model: str, tools: list[ToolSchema],
                 tool_choice: str | None) -> dict[str, Any]:
        """The request's fields other than `messages` (model/body.py joins those in)."""
        if ep.tools is not None:
            tools = [t for t in tools if t["function"]["name"] in ep.tools]
        if ep.max_argument_chars is not None or ep.max_argument_items is not None:
            tools = [ToolSchema(type=t["type"], function=ToolSpec(
                name=t["function"]["name"], description=t["function"]["description"],
                parameters=bound_arguments(t["function"]["parameters"],
                                           ep.max_argument_chars, ep.max_argument_items)))
                for t in tools]
        fields: dict[str, Any] = {
            "model": model, "stream": True, "stream_options": {"include_usage": True}}
        if tool_choice and tool_choice not in TOOL_CHOICE_WORDS:
            named = [t for t in tools if t["function"]["name"] == tool_choice]
            if not named:
                raise BadRequest(f"tool_choice names {tool_choice!r}, which is not a tool")
            tools = named
            # One tool and "required" is the named form that llama-server, vLLM and OpenAI
            # all accept; llama-cpp-python only knows the object form.
            tool_choice = "required"
            if ep.named_tool_choice:
                fields["tool_choice"] = {"type": "function", "function": {"name": named[0][
                    "function"]["name"]}}
        if tools:
            fields["tools"] = tools
            if tool_choice and "tool_choice" not in fields:
                fields["tool_choice"] = tool_choice
        fields.update(ep.params)  # an endpoint's own settings win, as `extra_body` did
        fields.pop("messages", None)
        return fields

    async def _open(self, client: Any, fields: dict[str, Any],
                    messages: list[ModelMessage], timeout: float) -> Any:
        """Send the request and return the stream of chunks. The body goes as bytes the
        client sends as they are (`post` with `content`): each message's JSON is made
        once for all the calls that send it (model/body.py), and the client's own walk of
        `messages` through its request types (~0.3 ms a message) is skipped."""
        from openai import AsyncStream
        from openai.types.chat import ChatCompletion, ChatCompletionChunk

        payload = model_body.body(fields, messages)
        # asyncio.timeout, not wait_for: 3.11's wait_for drops a cancel that lands once the
        # awaited result is ready (the user's stop was lost and the turn streamed on).
        async with asyncio.timeout(
                timeout * (int(getattr(self.settings, "model_retries", 2)) + 1) + 10):
            return await client.post("/chat/completions", content=payload,
                                     cast_to=ChatCompletion, stream=True,
                                     stream_cls=AsyncStream[ChatCompletionChunk])

    async def stream(
        self, messages: list[ModelMessage], tools: list[ToolSchema], *,
        model: str | None = None, endpoint: str | None = None, tool_choice: str | None = None,
        own: dict[str, Endpoint] | None = None,
    ) -> AsyncGenerator[tuple[str, Any], None]:
        """Yields ("delta", text) and ("reasoning", text) while the reply streams, then
        ("reply", Reply). Raises ModelError (its `partial` holds what had arrived).
        `own`: the session's owner's own endpoints (see `resolve`)."""
        ep, model_id = self.resolve(model, endpoint, own)
        if ep.own:
            await self._check_own(ep)
        fields = self._request(ep, model_id, tools, tool_choice)
        client = self.client_for(ep)
        timeout = self.timeout
        assembler = StreamAssembler()
        try:
            stream = await self._open(client, fields, messages, timeout)
            iterator = stream.__aiter__()
            while True:
                try:
                    async with asyncio.timeout(timeout):  # not wait_for: see _open
                        chunk = await iterator.__anext__()
                except StopAsyncIteration:
                    break
                for kind, text in assembler.add(chunk):
                    yield ("delta" if kind == "content" else "reasoning"), text
            reply = assembler.finish()
        except StreamError as e:
            message = ep.scrub(f"the model server at {ep.where()}: {e}")
            log.warning("model error (model %s): %s", model_id, message)
            raise ModelError(message, e.partial) from e
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except Exception as e:  # noqa: BLE001 - every client failure gets its sentence
            message = describe(e, ep, model_id, timeout)
            log.warning("model error (model %s): %s", model_id, message)
            raise ModelError(message, assembler.reply) from e
        if not reply.usage:
            reply.usage = estimate_usage(messages, reply)
        yield "reply", reply

    async def _check_own(self, ep: Endpoint) -> None:
        """A user's endpoint is reached only under the import's URL rules, checked at each
        turn (its host may resolve elsewhere since it was added)."""
        try:
            await asyncio.to_thread(reach.check_url, self.settings.endpoint_hosts,
                                    ep.base_url or "", "a model endpoint",
                                    variable_of("endpoint_hosts"))
        except BraidError as e:
            raise ModelError(ep.scrub(f"the model server at {ep.where()} is not reached: "
                                      f"{e.message}")) from None

    async def list_models(self) -> list[ModelEntry]:
        """Every endpoint's models: the configured ones and what GET /v1/models lists."""
        out: list[ModelEntry] = []
        for ep in self.endpoints.values():
            ids, error = await self._models_of(ep)
            for model_id in ids:
                out.append({"id": model_id, "endpoint": ep.name})
            if error and not ids:
                out.append({"id": None, "endpoint": ep.name, "error": error})
        return out

    async def _models_of(self, ep: Endpoint) -> tuple[list[str], str | None]:
        if ep.is_demo:
            return [DEMO], None
        cached = self._listed.get(ep.name)
        if cached and time.monotonic() - cached[0] < LIST_TTL:
            return cached[1], cached[2]
        ids = list(ep.models)
        error = None
        try:
            client = self.client_for(ep).with_options(max_retries=0)
            page = await asyncio.wait_for(client.models.list(timeout=LIST_TIMEOUT),
                                          LIST_TIMEOUT + 1)
            for item in page.data:
                if item.id not in ids:
                    ids.append(str(item.id))
        except Exception as e:  # noqa: BLE001 - a down server lists its configured models
            error = describe(e, ep, "", LIST_TIMEOUT)
            log.warning("listing models: %s", error)
        self._listed[ep.name] = (time.monotonic(), ids, error)
        return ids, error

    async def forget(self, ep: Endpoint) -> None:
        """A user removed or changed their endpoint `ep`: its client goes (its connections
        closed), in this process; another process's goes at shutdown."""
        client = self._clients.pop((ep.name, ep.base_url, ep.api_key), None)
        if client is not None:
            await client.close()

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()

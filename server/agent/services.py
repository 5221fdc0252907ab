"""`Services`: what the agent and the features are given to work with — settings, the
session store, the index, users, branch locks, the event bus, the live runs, the packer,
the model client and the message queue. `app.braid.Braid` provides them (the composition
root); the layers below `app` name them only through this Protocol, so none of them imports
the app.

Read-only properties: a `Braid` whose `index` is SQLite's or PostgreSQL's fits as it is."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from server.agent.live_runs import RunRegistry, TurnGate
from server.agent.mcp_servers.pool import McpPool
from server.base.events import EventBus
from server.base.results import RunStatus
from server.base.settings import Settings
from server.git.packing import Packer
from server.model.client import ModelClient
from server.store.index import SessionIndex
from server.store.locks import BranchLocks
from server.store.queue import MessageQueue
from server.store.search import MessageSearch
from server.store.session_store import SessionStore
from server.store.users import UserStore


class RemoteRuns(Protocol):
    """A team server's view of runs other processes drive (`backends.pg_team.Team`)."""

    async def cancel_remote(self, session_id: str,
                            run_id: str | None) -> RunStatus | None: ...

    async def send_approval(self, session_id: str, run_id: str, call_id: str,
                            decision: str, reason: str) -> None: ...


class Services(Protocol):
    @property
    def settings(self) -> Settings: ...
    @property
    def data_dir(self) -> Path: ...
    @property
    def store(self) -> SessionStore: ...
    @property
    def index(self) -> SessionIndex: ...
    @property
    def search(self) -> MessageSearch: ...
    @property
    def users(self) -> UserStore: ...
    @property
    def locks(self) -> BranchLocks: ...
    @property
    def team(self) -> RemoteRuns | None: ...
    @property
    def bus(self) -> EventBus: ...
    @property
    def runs(self) -> RunRegistry: ...
    @property
    def packer(self) -> Packer: ...
    @property
    def model(self) -> ModelClient: ...
    @property
    def turn_gate(self) -> TurnGate: ...
    @property
    def queue(self) -> MessageQueue: ...
    @property
    def mcp(self) -> McpPool: ...

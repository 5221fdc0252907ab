"""Fixtures shared by tests/ and playwright/: a real uvicorn server on a free port, a JSON
WebSocket client, and git checks through the `git` CLI."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from server.app.memory import SERVER_ENV

ROOT = Path(__file__).resolve().parent
# `replay`: recorded real model servers behind a local HTTP server; `llama`: a real one.
pytest_plugins = ["tests.model_replay", "tests.live.llama", "tests.pg"]
TOKEN = "test-token-0123456789"


# -- where tests write: a RAM file system when there is one. Every turn syncs its files
# (docs/DESIGN.md "Durability"), ~10 ms a sync on a VM's disk, and nothing here tests what a
# disk keeps: the power cut has its own file system (tests/powercut.py), the syncs' cost is
# bench/durability.py's. A test that needs a real disk asks for `disk_path`.
# BRAID_TEST_TMP=disk keeps everything on the disk (pytest's default place).
RAM_DIR = Path("/dev/shm")


def pytest_configure(config: pytest.Config) -> None:
    if config.option.basetemp or os.environ.get("BRAID_TEST_TMP") == "disk":
        return
    try:
        room = os.statvfs(RAM_DIR)
    except OSError:
        return
    if room.f_bavail * room.f_frsize >= 8 * 1024**3 and os.access(RAM_DIR, os.W_OK):
        # One folder a run (helpers' runs in parallel never clear each other's), gone at
        # its end (it is memory).
        config.option.basetemp = str(RAM_DIR / f"braid-tests-{os.getpid()}")


def pytest_unconfigure(config: pytest.Config) -> None:
    where = Path(str(config.option.basetemp or ""))
    if where.parent == RAM_DIR and where.name.startswith("braid-tests-"):
        subprocess.run(["rm", "-rf", "--one-file-system", str(where)], check=False)


@pytest.fixture
def disk_path() -> Iterator[Path]:
    """A folder on the disk, for a test of what only a disk does (a file's bytes are not
    the writer's memory, as they are on a RAM file system)."""
    import shutil
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="braid-test-", dir="/var/tmp"))
    yield where
    shutil.rmtree(where, ignore_errors=True)


# -- markers (pyproject.toml) for `scripts/test --quick`: set here from where a test lives and
# what it uses, so a new test is marked without anyone remembering to; `slow` is by hand.
CRASH_FILE = re.compile(r"crash|killed")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        where = item.path.relative_to(ROOT) if item.path.is_relative_to(ROOT) else item.path
        uses = set(getattr(item, "fixturenames", ()))  # the closure: fixtures of fixtures too
        if where.parts[0] == "playwright":
            item.add_marker(pytest.mark.browser)
        if "pg_cluster" in uses:
            item.add_marker(pytest.mark.pg)
        if "llama_files" in uses:
            item.add_marker(pytest.mark.llama)
        if where.parts[:2] == ("tests", "faults") and (
                CRASH_FILE.search(where.name) or "BRAID_CRASH_AT" in _source(item)):
            item.add_marker(pytest.mark.crash)


def _source(item: pytest.Item) -> str:
    """The test function's own text (a kill hidden in a helper is caught by the file name)."""
    try:
        return inspect.getsource(getattr(item, "function", None))
    except (TypeError, OSError):
        return ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    data_dir: Path
    port: int
    token: str = TOKEN
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    start_seconds: float = 30  # how long its start may take (more on a slow file system)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def start(self) -> Server:
        # SERVER_ENV: the allocator scripts/run gives a server (server/app/memory.py).
        env = {**os.environ, **SERVER_ENV, "BRAID_TOKEN": self.token, "BRAID_MODEL": "demo",
               **self.env}
        self.log_path = self.data_dir.parent / f"server-{self.port}.log"
        log = open(self.log_path, "ab")  # noqa: SIM115 - the server process owns it
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "server.cli", "serve", "--host", "127.0.0.1",
             "--port", str(self.port), "--data-dir", str(self.data_dir)],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + self.start_seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log_path.read_text()}")
            try:
                urllib.request.urlopen(f"{self.base_url}/login", timeout=1)
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"server did not answer in {self.start_seconds:.0f} s")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def session_path(self, session_id: str) -> Path:
        return self.data_dir / "sessions" / session_id

    # -- HTTP API ---------------------------------------------------------------------------

    def api(self, method: str, path: str, body: Any = None, token: str | None = None
            ) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.base_url}{path}", data=data, method=method)
        req.add_header("Authorization", f"Bearer {token or self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=60) as res:
                return res.status, json.loads(res.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def page(self, path: str) -> tuple[int, str]:
        """GET an HTML page or partial as a script would (Bearer): (status, text)."""
        req = urllib.request.Request(f"{self.base_url}{path}",
                                     headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=30) as res:
                return res.status, res.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def spawn_conflicting(self, session_id: str, turn_id: str,
                          colors: tuple[str, ...] = ("red", "blue")) -> None:
        """Sub-agents of a turn, labelled by colour, each writing its colour to same.txt: a
        merge of them conflicts (the merge panel's tests)."""
        for color in colors:
            status, body = self.api(
                "POST", f"/api/sessions/{session_id}/sub_agents",
                {"parent_turn_id": turn_id, "prompt": f"write same.txt {color}\nsay {color}",
                 "label": color})
            assert status == 200, body

    def new_session(self) -> str:
        status, body = self.api("POST", "/api/sessions", {})
        assert status == 201, body
        return str(body["session_id"])

    def run(self, session_id: str, text: str) -> dict[str, Any]:
        status, body = self.api("POST", f"/api/sessions/{session_id}/runs", {"input": text})
        assert status == 200, body
        return body

    def settled_runs(self, session_id: str, count: int,
                     timeout: float = 90) -> list[dict[str, Any]]:
        """The session's runs once at least `count` exist and none is RUNNING (a queue that
        has run, a restart that settled)."""
        deadline = time.monotonic() + timeout
        while True:
            status, info = self.api("GET", f"/api/sessions/{session_id}")
            assert status == 200, info
            runs = info["runs"]
            if len(runs) >= count and all(r["status"] != "RUNNING" for r in runs):
                return list(runs)
            assert time.monotonic() < deadline, runs
            time.sleep(0.1)

    def socket(self, session_id: str, token: str | None = None, **headers: str) -> WsClient:
        from websockets.sync.client import connect

        ws = connect(
            f"{self.ws_url}/ws/sessions/{session_id}?format=json",
            additional_headers={"Authorization": f"Bearer {token or self.token}", **headers},
            open_timeout=10, legacy=True,
        )
        return WsClient(ws)


class WsClient:
    """A JSON-format socket: send actions, read frames until a predicate matches."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.frames: list[dict[str, Any]] = []
        self._n = 0

    def send(self, action: str | None = None, raw: str | None = None, **params: Any) -> str:
        self._n += 1
        request_id = f"r{self._n}"
        if raw is None:
            raw = json.dumps({"action": action, "request_id": request_id, **params})
        self.ws.send(raw)
        return request_id

    def next(self, timeout: float = 15) -> dict[str, Any]:
        frame = json.loads(self.ws.recv(timeout=timeout))
        self.frames.append(frame)
        return frame

    def until(self, pred: Any, timeout: float = 20) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no matching frame")
            frame = self.next(timeout=left)
            if pred(frame):
                return frame

    def reply(self, request_id: str, timeout: float = 20) -> dict[str, Any]:
        return self.until(lambda f: f.get("type") in ("result", "error")
                          and f.get("request_id") == request_id, timeout)

    def call(self, action: str, **params: Any) -> dict[str, Any]:
        return self.reply(self.send(action, **params))

    def event(self, name: str, timeout: float = 20) -> dict[str, Any]:
        return self.until(lambda f: f.get("type") == "event" and f.get("event") == name, timeout)

    def close(self) -> None:
        self.ws.close()


def multipart(files: list[tuple[str, bytes]], folder: str = "") -> tuple[bytes, str]:
    """An upload's body (`files` parts, then `dir`) and its Content-Type."""
    boundary = uuid.uuid4().hex
    body = io.BytesIO()
    for name, data in files:
        body.write(f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; "
                   f"filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
                   .encode())
        body.write(data + b"\r\n")
    body.write(f"--{boundary}\r\nContent-Disposition: form-data; name=\"dir\"\r\n\r\n"
               f"{folder}\r\n--{boundary}--\r\n".encode())
    return body.getvalue(), f"multipart/form-data; boundary={boundary}"


def upload(server: Server, sid: str, files: list[tuple[str, bytes]], folder: str = "",
           token: str | None = None) -> tuple[int, Any]:
    """Files through the upload API (multipart, as the page sends them): (status, body)."""
    body, ctype = multipart(files, folder)
    req = urllib.request.Request(f"{server.base_url}/api/sessions/{sid}/files",
                                 data=body, method="POST")
    req.add_header("Authorization", f"Bearer {token or server.token}")
    req.add_header("Content-Type", ctype)
    try:
        with urllib.request.urlopen(req, timeout=30) as res:
            return res.status, json.loads(res.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def git(repo: Path, *args: str) -> str:
    """The git CLI on a session folder: tests check the repository as a user would."""
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def assert_fsck(repo: Path) -> None:
    out = subprocess.run(["git", "-C", str(repo), "fsck", "--strict"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Any]:
    started: list[Server] = []

    def make(data_dir: Path | None = None, **env: str) -> Server:
        srv = Server(data_dir=data_dir or tmp_path / "data", port=free_port(), env=env)
        started.append(srv.start())
        return srv

    yield make
    for srv in started:
        srv.stop()


@pytest.fixture
def roots(tmp_path: Path) -> Path:
    """A folder to import from and export to: the server's BRAID_IMPORT_ROOTS (`srv`), with
    the data dir (tmp_path/data) outside it."""
    (tmp_path / "roots").mkdir()
    return tmp_path / "roots"


@pytest.fixture
def srv(server_factory: Any, roots: Path) -> Server:
    return server_factory(BRAID_IMPORT_ROOTS=str(roots))


@pytest.fixture
def server(server_factory: Any) -> Server:
    return server_factory()


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for a whole module of tests that each use their own sessions."""
    srv = Server(data_dir=tmp_path_factory.mktemp("shared") / "data", port=free_port())
    srv.start()
    yield srv
    srv.stop()



# -- core tests: a Braid on a temp data dir ------------------------------------------------


@pytest.fixture
async def make_braid(tmp_path: Path) -> Any:
    """Start core `Braid` objects on temp data dirs (several for restart tests)."""
    from server.app.braid import Braid
    from server.base.settings import Settings

    made: list[Any] = []

    async def make(data_dir: Path | None = None, **settings: Any) -> Any:
        braid = Braid(Settings(data_dir=data_dir or tmp_path / f"data{len(made)}", **settings))
        await braid.start()
        made.append(braid)
        return braid

    yield make
    for braid in made:
        await braid.stop()


@pytest.fixture
async def braid(make_braid: Any) -> Any:
    return await make_braid()


async def new_session(braid: Any, user_id: str = "local") -> tuple[str, Path]:
    from server.features import sessions

    created = await sessions.create_session(braid, user_id)
    return created["session_id"], braid.store.path(created["session_id"])


async def call_action(braid: Any, user_id: str, session_id: str, name: str,
                      **raw: Any) -> Any:
    """An action as a client sends it (raw parameters): parsed by its declaration, then its
    core function called, exactly as the socket does (server/web/specs.py)."""
    from server.web.actions import by_name
    from server.web.specs import parse_params

    action = by_name(name)
    return await action.call(braid, user_id, session_id, **parse_params(action, raw))


async def run_to_end(braid: Any, user_id: str, session_id: str, text: str) -> Any:
    """Start a turn and wait for it: `send_message`'s HTTP twin (the finished run)."""
    from server.features.queue import send_to_end

    return await send_to_end(braid, user_id, session_id, text)


async def run_turn(braid: Any, session_id: str, text: str, user_id: str = "local") -> Any:
    return await run_to_end(braid, user_id, session_id, text)


async def next_event(queue: asyncio.Queue[dict[str, Any]], name: str) -> dict[str, Any]:
    """The data of the next `name` event on an EventBus queue."""

    async def wait() -> dict[str, Any]:
        while True:
            frame = await queue.get()
            if frame["event"] == name:
                return frame["data"]

    return await asyncio.wait_for(wait(), timeout=20)


@pytest.fixture(scope="module")
def other_token(shared_server: Server) -> str:
    """A second user, made with the CLI as an admin would."""
    out = subprocess.run(
        [sys.executable, "-m", "server.cli", "user", "add", "other", "--data-dir",
         str(shared_server.data_dir)], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]

# -- browser tests: Debian's Chromium through Playwright (it cannot download its own) --
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    return {
        **browser_type_launch_args,
        "executable_path": os.environ.get("CHROMIUM", "/usr/bin/chromium"),
        "args": CHROMIUM_ARGS,
    }


@pytest.fixture
def login(shared_server: Any) -> Any:
    """Log a page in through the login URL, as a user would from `braid serve`'s output."""

    def do(page: Any, session_id: str | None = None) -> Any:
        page.goto(f"{shared_server.base_url}/login?token={shared_server.token}")
        if session_id:
            page.goto(f"{shared_server.base_url}/s/{session_id}")
        page.wait_for_selector("#conn[data-state=open]", timeout=10_000)
        return page

    return do


def send_from_page(page: Any, text: str, *, until_done: bool = False) -> str:
    """Type a message in the composer, press Enter, and return the run id of the turn it
    starts (after it completes, with `until_done`)."""
    from playwright.sync_api import expect

    before = page.locator("section.turn").count()
    page.fill("#composer-text", text)
    page.press("#composer-text", "Enter")
    turn = page.locator("section.turn").nth(before)
    turn.wait_for(timeout=15_000)
    if until_done:
        expect(turn).to_have_attribute("data-status", "COMPLETED", timeout=15_000)
    else:
        expect(page.locator("#composer-text")).to_have_value("")
    return str(turn.get_attribute("data-run-id"))


class ConsoleErrors:
    """Console errors and uncaught exceptions of every page of a browser test's context."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.allowed: list[str] = []

    def allow(self, pattern: str) -> None:
        """Expect errors matching the regular expression `pattern` (a deliberate 401 page,
        a socket that cannot connect while the test has the server stopped)."""
        self.allowed.append(pattern)

    def allow_server_down(self) -> None:
        self.allow(r"WebSocket connection to .* failed")
        self.allow(r": Event$")  # htmx's ws extension logs the socket's error event

    def watch(self, page: Any) -> None:
        def on_console(msg: Any) -> None:
            if msg.type == "error":
                self.errors.append(f"console.error on {page.url}: {msg.text}")

        page.on("console", on_console)
        page.on("pageerror", lambda exc: self.errors.append(f"uncaught on {page.url}: {exc}"))

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(re.search(a, e) for a in self.allowed)]


@pytest.fixture(autouse=True)
def console_errors(request: pytest.FixtureRequest) -> Iterator[ConsoleErrors | None]:
    """Browser tests fail on any console error (htmx:oobErrorNoTarget included) or uncaught
    exception in any page they opened."""
    if "page" not in request.fixturenames:
        yield None
        return
    watcher = ConsoleErrors()
    context = request.getfixturevalue("context")
    for page in context.pages:
        watcher.watch(page)
    context.on("page", watcher.watch)
    yield watcher
    unexpected = watcher.unexpected()
    assert not unexpected, "browser console errors:\n" + "\n".join(unexpected)


# -- a real MCP server over streamable HTTP on loopback (tests/fixtures/mcp_server.py) -----


@contextlib.contextmanager
def mcp_http_server(folder: Path) -> Iterator[str]:
    """The tests' MCP server over HTTP on 127.0.0.1, its cwd `folder`: its URL while open."""
    port = free_port()
    folder.mkdir(parents=True, exist_ok=True)
    script = ROOT / "tests" / "fixtures" / "mcp_server.py"
    proc = subprocess.Popen([sys.executable, str(script), "http", str(port)], cwd=folder,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)

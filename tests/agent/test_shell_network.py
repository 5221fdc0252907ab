"""A sandboxed command's network (DESIGN §4 "The shell"): only through Braid's egress proxy,
by the session's consent (`shell_network` ask/on/off), private addresses only where
BRAID_SHELL_HOSTS lists them. Against a real loopback web server of the host at 127.0.0.2
(listed), a real server, real curl in the sandbox."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from conftest import Server, WsClient, free_port

HOST = "127.0.0.2"  # a loopback address of the host, listed in BRAID_SHELL_HOSTS


class Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = f"hello from the host {self.path}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def web() -> Iterator[int]:
    httpd = ThreadingHTTPServer((HOST, 0), Hello)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield int(httpd.server_address[1])
    httpd.shutdown()


@pytest.fixture(scope="module")
def net_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(data_dir=tmp_path_factory.mktemp("net") / "data", port=free_port(),
                 env={"BRAID_SHELL": "sandbox", "BRAID_SHELL_HOSTS": HOST})
    srv.start()
    yield srv
    srv.stop()


def fetch(port: int, path: str, *flags: str) -> str:
    return f"curl -s -S -m 20 {' '.join(flags)} http://{HOST}:{port}{path}; echo curl=$?"


def start(server: Server, sid: str, command: str) -> tuple[WsClient, str]:
    ws = server.socket(sid)
    reply = ws.call("send_message", text=f"shell {command}\nsay done")
    assert reply["type"] == "result", reply
    return ws, str(reply["data"]["run_id"])


def ended(ws: WsClient, run_id: str) -> dict[str, Any]:
    frame = ws.until(lambda f: f.get("event") in ("run_completed", "run_error")
                     and f["data"]["run_id"] == run_id, timeout=90)
    return dict(frame["data"])


def tool_text(server: Server, sid: str, run_id: str) -> str:
    status, run = server.api("GET", f"/api/runs/{run_id}?session_id={sid}")
    assert status == 200, run
    return "\n".join(m["content"] for m in run["messages"] if m["role"] == "tool")


def with_network(server: Server, mode: str) -> str:
    sid = server.new_session()
    status, info = server.api("PATCH", f"/api/sessions/{sid}", {"shell_network": mode})
    assert status == 200 and info["shell_network"] == mode, info
    return sid


def test_ask_waits_for_the_user_once_per_host(net_server: Server, web: int) -> None:
    sid = net_server.new_session()
    _, info = net_server.api("GET", f"/api/sessions/{sid}")
    assert info["shell_network"] == "ask" and info["shell_network_hosts"] == []
    ws, run_id = start(net_server, sid, fetch(web, "/one") + "; " + fetch(web, "/two"))
    asked = ws.until(lambda f: f.get("event") == "approval_needed", timeout=60)["data"]
    assert asked["tool"] == "network" and asked["args"]["host"] == HOST, asked
    reply = ws.call("approve_tool_call", run_id=run_id, call_id=asked["call_id"],
                    decision="approve")
    assert reply["type"] == "result", reply
    done = ended(ws, run_id)
    text = tool_text(net_server, sid, run_id)
    assert "hello from the host /one" in text and "hello from the host /two" in text, done
    _, info = net_server.api("GET", f"/api/sessions/{sid}")
    assert info["shell_network_hosts"] == [HOST]
    # Allowed for the session: the next command is not asked.
    ws2, again = start(net_server, sid, fetch(web, "/three"))
    frame = ws2.until(lambda f: f.get("event") in ("approval_needed", "run_completed"),
                      timeout=60)
    assert frame["event"] == "run_completed"
    assert "hello from the host /three" in tool_text(net_server, sid, again)
    # Taken back: asked again.
    status, info = net_server.api("PATCH", f"/api/sessions/{sid}", {"shell_network_hosts": []})
    assert status == 200 and info["shell_network_hosts"] == []
    ws3, third = start(net_server, sid, fetch(web, "/four"))
    asked = ws3.until(lambda f: f.get("event") == "approval_needed", timeout=60)["data"]
    ws3.call("approve_tool_call", run_id=third, call_id=asked["call_id"], decision="deny",
             reason="not today")
    ended(ws3, third)
    text = tool_text(net_server, sid, third)
    assert "hello from the host" not in text and "did not allow" in text and "not today" in text
    for client in (ws, ws2, ws3):
        client.close()


def test_on_reaches_without_a_question_and_tunnels(net_server: Server, web: int) -> None:
    sid = with_network(net_server, "on")
    ws, run_id = start(net_server, sid, fetch(web, "/plain") + "; " + fetch(web, "/tunnel", "-p"))
    frame = ws.until(lambda f: f.get("event") in ("approval_needed", "run_completed"),
                     timeout=60)
    assert frame["event"] == "run_completed"
    text = tool_text(net_server, sid, run_id)
    assert "hello from the host /plain" in text and "hello from the host /tunnel" in text
    ws.close()


def test_off_reaches_nothing(net_server: Server, web: int) -> None:
    sid = with_network(net_server, "off")
    ws, run_id = start(net_server, sid, fetch(web, "/off") + "; " +
                       fetch(web, "/off", "-x", "http://127.0.0.1:3128"))
    frame = ws.until(lambda f: f.get("event") in ("approval_needed", "run_completed"),
                     timeout=60)
    assert frame["event"] == "run_completed"
    text = tool_text(net_server, sid, run_id)
    assert "hello from the host" not in text and "curl=7" in text
    ws.close()


def test_a_private_address_not_listed_is_refused_without_a_question(net_server: Server,
                                                                    web: int) -> None:
    sid = with_network(net_server, "on")
    ws, run_id = start(net_server, sid, f"curl -s -m 20 http://127.0.0.3:{web}/x; "
                       f"curl -s -m 20 --noproxy '' http://localhost:{net_server.port}/; "
                       f"curl -sS -m 20 -p http://10.0.0.1:{web}/x; echo end")
    frame = ws.until(lambda f: f.get("event") in ("approval_needed", "run_completed"),
                     timeout=60)
    assert frame["event"] == "run_completed"
    text = tool_text(net_server, sid, run_id)
    assert "hello from the host" not in text
    assert text.count("the server's own network") == 2  # 127.0.0.3 and localhost
    assert "CONNECT tunnel failed, response 403" in text  # 10.0.0.1
    ws.close()


def _wheel() -> bytes:
    """A real, minimal wheel: demo-pkg 1.0, one module."""
    files = {"demo_pkg/__init__.py": b"GREETING = 'demo from the index'\n",
             "demo_pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo-pkg\n"
                                                b"Version: 1.0\n",
             "demo_pkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\n"
                                             b"Root-Is-Purelib: true\nTag: py3-none-any\n"}
    def digest(data: bytes) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record = "".join(f"{name},sha256={digest(data)},{len(data)}\n"
                     for name, data in files.items()) + "demo_pkg-1.0.dist-info/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as whl:
        for name, data in files.items():
            whl.writestr(name, data)
        whl.writestr("demo_pkg-1.0.dist-info/RECORD", record)
    return buf.getvalue()


def _tarball() -> bytes:
    """A real npm package tarball: is-tiny 1.0.0."""
    files = {"package/package.json": json.dumps({"name": "is-tiny", "version": "1.0.0",
                                                 "main": "index.js"}).encode(),
             "package/index.js": b"module.exports = 'tiny from the registry';\n"}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class Registry(BaseHTTPRequestHandler):
    """A package index (PEP 503 simple) and an npm registry, each with one package."""

    wheel = _wheel()
    tarball = _tarball()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        base = f"http://{HOST}:{self.server.server_address[1]}"
        whl = "demo_pkg-1.0-py3-none-any.whl"
        digest = hashlib.sha256(self.wheel).hexdigest()
        integrity = "sha512-" + base64.b64encode(hashlib.sha512(self.tarball).digest()).decode()
        pages = {
            "/simple/demo-pkg/": ("text/html", f'<a href="/files/{whl}#sha256={digest}">'
                                               f"{whl}</a>".encode()),
            f"/files/{whl}": ("application/octet-stream", self.wheel),
            "/is-tiny": ("application/json", json.dumps({
                "name": "is-tiny", "dist-tags": {"latest": "1.0.0"},
                "versions": {"1.0.0": {"name": "is-tiny", "version": "1.0.0", "dist": {
                    "tarball": f"{base}/is-tiny/-/is-tiny-1.0.0.tgz", "integrity": integrity,
                    "shasum": hashlib.sha1(self.tarball).hexdigest()}}}}).encode()),  # noqa: S324
            "/is-tiny/-/is-tiny-1.0.0.tgz": ("application/octet-stream", self.tarball),
        }
        kind, body = pages.get(self.path, ("text/plain", b""))
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_pip_and_npm_install_from_an_allowed_registry(net_server: Server) -> None:
    # Through the egress proxy (http_proxy, npm_config_proxy: the sandbox's environment),
    # with the session's consent asked once per host; a registry of the host, listed in
    # BRAID_SHELL_HOSTS, stands in for PyPI and npmjs (no internet in tests).
    httpd = ThreadingHTTPServer((HOST, 0), Registry)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://{HOST}:{httpd.server_address[1]}"
    try:
        sid = net_server.new_session()
        ws, run_id = start(net_server, sid, (
            f"python3 -m pip install -q --no-cache-dir --break-system-packages --target pylib "
            f"--index-url {base}/simple/ --trusted-host {HOST} demo-pkg 2>&1 | tail -3; "
            "python3 -c 'import sys; sys.path.insert(0, \"pylib\"); import demo_pkg; "
            "print(demo_pkg.GREETING)'; "
            f"npm install --no-audit --no-fund --no-update-notifier --registry {base}/ "
            "is-tiny 2>&1 | tail -3; node -e 'console.log(require(\"is-tiny\"))'"))
        asked = ws.until(lambda f: f.get("event") == "approval_needed", timeout=120)["data"]
        assert asked["tool"] == "network" and asked["args"]["host"] == HOST, asked
        ws.call("approve_tool_call", run_id=run_id, call_id=asked["call_id"],
                decision="approve")
        frame = ws.until(lambda f: f.get("event") in ("approval_needed", "run_completed",
                                                      "run_error"), timeout=240)
        assert frame["event"] == "run_completed", frame  # one question for the one host
        text = tool_text(net_server, sid, run_id)
        assert "demo from the index" in text and "tiny from the registry" in text, text
        ws.close()
    finally:
        httpd.shutdown()

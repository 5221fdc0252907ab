"""The live tests' real OpenAI-compatible server (a pytest plugin, see the root conftest):
llama.cpp's `llama-server`, built by scripts/llama-server-setup (cached under
~/.cache/braid/), serving SmolLM2-135M-Instruct on a free 127.0.0.1 port, with a ChatML
template that can express tool calls (chatml-tools.jinja)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, free_port

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def llama_files() -> tuple[Path, Path]:
    out = subprocess.run([str(ROOT / "scripts" / "llama-server-setup")], capture_output=True,
                         text=True, timeout=3000)
    assert out.returncode == 0, out.stdout + out.stderr
    binary, model = out.stdout.strip().splitlines()[-2:]
    return Path(binary), Path(model)


@dataclass
class Llama:
    binary: Path
    model: Path
    port: int
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> Llama:
        log = open(self.log, "ab")  # noqa: SIM115 - the process owns it
        # A 16k context: a forced spawn's bounded arguments may still name 8 children, and
        # the next request carries their answers (orchestrate caps them at 3,200 characters)
        # for each call the model made, more than a 4k context holds on some CPUs.
        # One thread: on a shared 2-core machine, ggml's spinning worker threads slow a
        # 135M model down a hundredfold.
        self.proc = subprocess.Popen(
            [str(self.binary), "-m", str(self.model), "--alias", "smollm2", "-c", "16384",
             "--jinja", "--chat-template-file", str(HERE / "chatml-tools.jinja"),
             "--host", "127.0.0.1", "--port", str(self.port), "-t", "1", "-tb", "1"],
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited: {self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health",
                                            timeout=2) as res:
                    if res.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("llama-server did not get ready in 120 s")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def endpoints_toml(base_url: str) -> str:
    """Three endpoints on one server: plain chat, one that forces write_file on a turn's
    first call, and one with room for a long answer (to stop it midway)."""
    return (
        f'[[endpoints]]\nname = "llama"\nbase_url = "{base_url}"\ntool_choice = "none"\n'
        'params = { max_tokens = 32, temperature = 0 }\n'
        f'[[endpoints]]\nname = "llama-tools"\nbase_url = "{base_url}"\n'
        # The call's strings bounded (the server constrains a forced call by the tool's
        # schema), so its JSON ends within max_tokens however this CPU decodes; greedy, and
        # no repeating itself.
        'tool_choice = "write_file"\nmax_argument_chars = 40\n'
        'params = { max_tokens = 200, temperature = 0, '
        'repeat_penalty = 1.3, repeat_last_n = 16 }\n'
        f'[[endpoints]]\nname = "llama-long"\nbase_url = "{base_url}"\ntool_choice = "none"\n'
        'params = { max_tokens = 1500, temperature = 0 }\n')


@pytest.fixture
def llama_factory(llama_files: tuple[Path, Path], tmp_path: Path) -> Iterator[Any]:
    started: list[Llama] = []

    def make(port: int | None = None) -> Llama:
        llama = Llama(*llama_files, port=port or free_port(),
                      log=tmp_path / f"llama-{len(started)}.log")
        started.append(llama.start())
        return llama

    yield make
    for llama in started:
        llama.stop()


@pytest.fixture(scope="module")
def llama(llama_files: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Llama]:
    one = Llama(*llama_files, port=free_port(),
                log=tmp_path_factory.mktemp("llama") / "llama.log").start()
    yield one
    one.stop()


# How long a live test waits for the model server: the tests check Braid's path, not the
# server's speed, and a busy machine of two cores has kept a 135M model's first token back
# for over 60 s (CI: "sent nothing for 60 s").
MODEL_WAIT = 240
FRAME_WAIT = MODEL_WAIT + 60


def braid_on(server_factory: Any, tmp_path: Path, llama: Llama, **env: str) -> Any:
    path = tmp_path / "endpoints.toml"
    path.write_text(endpoints_toml(llama.base_url))
    return server_factory(BRAID_ENDPOINTS=str(path), BRAID_MODEL_TIMEOUT=str(MODEL_WAIT),
                          BRAID_MODEL_RETRIES="0", **env)


def use(ws: Any, model: str) -> None:
    reply = ws.call("update_session", model=model)
    assert reply["type"] == "result", reply


def runs_json(reply: dict[str, Any]) -> str:
    return json.dumps(reply, indent=1)[:2000]

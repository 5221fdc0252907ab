"""Import cost: Braid's import of a folder through the HTTP API (`POST /api/sessions` with
`source`, answered once the session exists: files listed by `git ls-files`, blobs from bytes,
trees with TreeBuilder, files copied into workdir/, the index written and refreshed), next
to `git add -A && git commit` of the same files in a copy of the folder that is already a
git repository (what a peer that `git add`s the user's workspace pays, without any copy).

Folders of 10,000 and 100,000 files of ~100 bytes in folders of 100, with a .gitignore'd
node_modules/ of 1,000 files besides. Prints medians measured side by side in one run.

Run: .venv/bin/python bench/import.py [--quick]
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conftest import TOKEN, Server, free_port  # noqa: E402

SIZES = (10_000, 100_000)
SAMPLES = {10_000: 5, 100_000: 3}


def make_folder(path: Path, files: int) -> None:
    for i in range(files):
        d = path / f"d{i // 100:04d}"
        if i % 100 == 0:
            d.mkdir(parents=True)
        (d / f"f{i % 100:02d}.txt").write_text(f"file {i}\n" + "x" * 90 + "\n")
    (path / ".gitignore").write_text("node_modules/\n")
    for i in range(1000):
        d = path / "node_modules" / f"p{i // 100}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"m{i}.js").write_text("module.exports = 1\n")


def git_add_commit(folder: Path) -> float:
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    start = time.perf_counter()
    subprocess.run(f"cd {folder} && git add -A && git -c user.name=b -c user.email=b@x "
                   "-c gc.auto=0 commit -q -m import", shell=True, check=True)
    return time.perf_counter() - start


def braid_import(srv: Server, folder: Path) -> float:
    body = json.dumps({"source": {"path": str(folder)}}).encode()
    req = urllib.request.Request(f"{srv.base_url}/api/sessions", data=body, method="POST",
                                 headers={"Authorization": f"Bearer {TOKEN}",
                                          "Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(req, timeout=1200) as res:
        created = json.loads(res.read())
    took = time.perf_counter() - start
    path = srv.session_path(created["session_id"])
    status = subprocess.run(["git", "-C", str(path), "status", "--porcelain"],
                            capture_output=True, text=True, check=True).stdout
    assert status == "", status[:200]
    shutil.rmtree(path)  # keep the disk small between samples
    return took


def main() -> None:
    sizes = (10_000,) if "--quick" in sys.argv else SIZES
    tmp = Path(tempfile.mkdtemp(prefix="braid-bench-import-"))
    srv = Server(data_dir=tmp / "data", port=free_port(),
                 env={"BRAID_IMPORT_ROOTS": str(tmp)})
    srv.start()
    rows = []
    try:
        for files in sizes:
            src = tmp / f"src{files}"
            make_folder(src, files)
            ours, theirs = [], []
            for n in range(SAMPLES[files]):
                # Interleaved, so both see the same machine load and page cache.
                ours.append(braid_import(srv, src))
                copy = tmp / f"copy{files}-{n}"
                shutil.copytree(src, copy)
                theirs.append(git_add_commit(copy))
                shutil.rmtree(copy, ignore_errors=True)
            rows.append((files, statistics.median(ours), statistics.median(theirs)))
            shutil.rmtree(src)
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'files':>8} | {'braid import (HTTP)':>20} | {'git add -A && commit':>20} | "
          f"{'ratio':>6}")
    print(f"{'-' * 8}-+-{'-' * 20}-+-{'-' * 20}-+-{'-' * 6}")
    for files, ours_s, theirs_s in rows:
        print(f"{files:>8,} | {ours_s * 1000:>17.0f} ms | {theirs_s * 1000:>17.0f} ms | "
              f"{ours_s / theirs_s:>6.2f}")
    print(f"(medians of {', '.join(str(SAMPLES[s]) for s in sizes)} runs; cpus: "
          f"{os.cpu_count()})")


if __name__ == "__main__":
    main()

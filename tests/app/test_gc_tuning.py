"""The serving process's collector (gc_tuning.py): start-up frozen, young collections rare
enough that a turn's temporaries (a parsed model request) die before one sees them."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT

CHECK = """
import gc, json
from server.app.gc_tuning import tune_for_serving
tune_for_serving()
collections = []
gc.callbacks.append(lambda phase, info: phase == "start" and collections.append(1))
messages = [{"role": "user", "content": f"m {i}", "tool_calls": [{"id": str(i)}]}
            for i in range(2300)]
body = json.dumps({"messages": messages})
for _ in range(10):  # ten parses of a request the size of the default context window
    json.loads(body)
print(json.dumps({"threshold": gc.get_threshold()[0], "frozen": gc.get_freeze_count(),
                  "collections": len(collections)}))
"""


def test_a_served_process_collects_rarely_and_freezes_start_up() -> None:
    out = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    found = json.loads(out)
    assert found["threshold"] == 50_000
    assert found["frozen"] > 1000  # the imported modules' objects
    assert found["collections"] == 0  # default thresholds: dozens here

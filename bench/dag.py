"""DAG panel cost: building the graph from git, laying it out, and rendering the SVG partial,
for sessions of 100 and 2,000 commits (turns of tool-batch + turn commits on main, a sub-agent
branch of three commits every 40 commits, merged back ten commits later).

Prints medians: `graph` walks the commits (a cold build), `cached` is the same call when the
branch tips have not moved (two tabs, repeated dag_changed), `layout` and `render` turn it into
the panel's SVG partial at its default 200 rows ("show more" doubles that); `all rows` builds,
lays out and renders every row at once, the worst case.

Run: .venv/bin/python bench/dag.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pygit2  # noqa: E402

from server.base.ids import new_message_id, now_iso  # noqa: E402
from server.base.records import to_json_bytes  # noqa: E402
from server.features import dag  # noqa: E402
from server.git.commits import commit_message  # noqa: E402
from server.git.session import GitSession  # noqa: E402
from server.web.render import dag as dag_views  # noqa: E402
from server.web.render import dag_layout  # noqa: E402

SAMPLES = 9


def build(root: Path, commits: int) -> GitSession:
    git = GitSession.create(root, {"session_id": "b" * 32, "title": "bench", "user_id": "local",
                                   "created_at": now_iso()})
    repo, sig = git.repo, git.signature
    base_tree = git.head_commit().tree

    def answer_tree(text: str) -> pygit2.Oid:
        # A sub-agent tip holds its answer, so labelling the lane reads a real message.
        msg = {"id": new_message_id(), "role": "assistant", "content": text, "run_id": "r"}
        shard = repo.TreeBuilder()
        shard.insert(f"000001-assistant-{msg['id']}.json", repo.create_blob(to_json_bytes(msg)),
                     pygit2.enums.FileMode.BLOB)
        history = repo.TreeBuilder()
        history.insert("000", shard.write(), pygit2.enums.FileMode.TREE)
        top = repo.TreeBuilder(base_tree)
        top.insert("history", history.write(), pygit2.enums.FileMode.TREE)
        return top.write()

    def commit(ref: str, kind: str, parents: list[pygit2.Oid], tree: pygit2.Oid,
               run_id: str, n: int) -> pygit2.Oid:
        message = commit_message(f"{kind} {n}", kind, run_id, n)
        return repo.create_commit(ref, sig, sig, message, tree, parents)

    tip = git.head_oid()
    made, pending = 1, []
    while made < commits:
        run_id = new_message_id()
        for kind in ("tool-batch", "turn"):
            tip = commit("refs/heads/main", kind, [tip], base_tree.id, run_id, made)
            made += 1
        if made % 40 < 2:
            name = f"sub_{run_id[:10]}_agent_{made:08x}"
            sub = commit(None, "sub-agent", [tip], base_tree.id, "", made)
            sub_run = new_message_id()
            sub = commit(None, "tool-batch", [sub], base_tree.id, sub_run, made + 1)
            sub = commit(None, "turn", [sub], answer_tree(f"result {made}"), sub_run, made + 2)
            repo.branches.local.create(name, repo[sub])
            pending.append((made + 10, sub))
            made += 3
        if pending and made >= pending[0][0]:
            _, sub = pending.pop(0)
            tip = commit("refs/heads/main", "merge", [tip, sub], base_tree.id,
                         new_message_id(), made)
            made += 1
    return git


def median_ms(fn, samples: int = SAMPLES) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    print(f"{'commits':>8} {'branches':>8} {'lanes':>5} {'shown':>6} {'graph':>9} {'cached':>8} "
          f"{'layout':>9} {'render':>9} {'total':>9} {'all rows':>10}   (ms, median of {SAMPLES})")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (100, 2000):
            git = build(Path(tmp) / f"s{n}", n)
            data = dag.graph(git)
            laid = dag_layout.layout(data)
            t_graph = median_ms(lambda: dag._build(git, dag.DAG_LIMIT))  # noqa: B023
            t_cached = median_ms(lambda: dag.graph(git))  # noqa: B023
            t_layout = median_ms(lambda: dag_layout.layout(data))  # noqa: B023
            t_render = median_ms(lambda: dag_views.dag_html(laid, "b" * 32))  # noqa: B023

            def everything() -> None:
                full = dag_layout.layout(dag._build(git, dag.DAG_LIMIT), rows=dag_layout.MAX_ROWS)  # noqa: B023
                dag_views.dag_html(full, "b" * 32)

            t_all = median_ms(everything, 3)
            print(f"{len(data['nodes']):>8} {len(data['branches']):>8} {laid.lanes:>5} "
                  f"{laid.rows:>6} {t_graph:>9.2f} {t_cached:>8.2f} "
                  f"{t_layout:>9.2f} "
                  f"{t_render:>9.2f} {t_graph + t_layout + t_render:>9.2f} {t_all:>10.2f}")


if __name__ == "__main__":
    main()

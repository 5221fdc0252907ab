"""The sidebar's session rows in the order people read them: newest first, each fork right
under its parent (its own module: the page and the event views both order them)."""

from __future__ import annotations

from typing import cast

from server.base.records import SessionRow
from server.web.render.fragments import SessionRowView


def order_by_lineage(rows: list[SessionRow]) -> list[SessionRowView]:
    """Newest first, each fork right under its parent with a depth for indentation."""
    by_id = {r["session_id"]: cast(SessionRowView, r.copy()) for r in rows}  # depth below
    children: dict[str | None, list[SessionRowView]] = {}
    for row in by_id.values():
        parent = row.get("forked_from_session_id")
        children.setdefault(parent if parent in by_id else None, []).append(row)
    out: list[SessionRowView] = []

    def visit(parent: str | None, depth: int) -> None:
        for row in sorted(children.get(parent, []), key=lambda r: r["created_at"], reverse=True):
            row["depth"] = depth
            out.append(row)
            visit(row["session_id"], depth + 1)

    visit(None, 0)
    return out

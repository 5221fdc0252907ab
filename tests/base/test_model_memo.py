"""Per-message work kept between model calls (base/memo.py): made once per message object,
never handed to another object (even an equal one), and right however few it holds."""

from __future__ import annotations

from typing import Any

from server.base.memo import IdentityMemo


def test_values_are_made_once_per_object_and_in_order() -> None:
    made: list[int] = []

    def make(obj: dict[str, Any]) -> int:
        made.append(obj["v"])
        return obj["v"] * 10

    memo = IdentityMemo(make, size=8)
    objs = [{"v": i} for i in range(6)]
    assert memo.many(objs[:3]) == [0, 10, 20] and made == [0, 1, 2]
    # New objects at the front and the back, kept ones between: only the new are made.
    fresh = {"v": 99}
    assert memo.many([fresh, *objs]) == [990, 0, 10, 20, 30, 40, 50]
    assert made == [0, 1, 2, 99, 3, 4, 5]
    # An equal but different object is another message (read again from git): made afresh.
    twin = {"v": 1}
    assert memo.get(twin) == 10 and made[-1] == 1 and memo.get(objs[1]) == 10
    assert len(made) == 8


def test_more_objects_than_it_holds_still_get_their_own_values() -> None:
    memo = IdentityMemo(lambda o: o["v"] + 1, size=4)
    objs = [{"v": i} for i in range(50)]
    assert memo.many(objs) == [i + 1 for i in range(50)]
    assert memo.many(objs) == [i + 1 for i in range(50)]
    assert len(memo) <= 4
    assert memo.many([]) == []


def test_forget_all_also_empties_the_caches_by_value() -> None:
    """The replayed arguments' texts (model/messages.py) go with the memos once no session is
    open: else a burst of sessions' arguments stays for good (issue 11)."""
    from server.base import memo as model_memo
    from server.model import messages

    messages.valid_arguments('{"path": "a.txt"}')
    assert messages._valid_text.cache_info().currsize > 0
    model_memo.forget_all()
    assert messages._valid_text.cache_info().currsize == 0

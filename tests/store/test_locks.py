"""Branch locks (locks.py): one holder per (session, branch), freed however the holder ends."""

from __future__ import annotations

import asyncio

import pytest

from server.base.errors import Busy
from server.store.locks import LocalBranchLocks


async def test_one_holder_per_branch_and_the_block_frees_it_however_it_ends() -> None:
    locks = LocalBranchLocks()
    async with locks.hold("s1", "main") as lease:
        assert (lease.session_id, lease.branch) == ("s1", "main")
        with pytest.raises(Busy, match="main"):
            await locks.acquire("s1", "main")
        # Other branches and other sessions are independent.
        other = await locks.acquire("s1", "run/x")
        same_name = await locks.acquire("s2", "main")
        assert await locks.held("s1") == {"main", "run/x"}
        assert await locks.held("s2") == {"main"}
        await other.release()
        await same_name.release()
    assert await locks.held("s1") == set()
    with pytest.raises(RuntimeError):
        async with locks.hold("s1", "main"):
            raise RuntimeError("the holder failed")
    assert await locks.held("s1") == set()
    # A cancelled holder frees it too.
    entered = asyncio.Event()

    async def holder() -> None:
        async with locks.hold("s1", "main"):
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(holder())
    await entered.wait()
    assert await locks.held("s1") == {"main"}
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await locks.held("s1") == set()


async def test_release_is_idempotent_and_a_stale_lease_frees_nothing() -> None:
    locks = LocalBranchLocks()
    first = await locks.acquire("s", "main")
    await first.release()
    second = await locks.acquire("s", "main")
    await first.release()  # released twice: the new holder keeps the branch
    assert await locks.held("s") == {"main"}
    with pytest.raises(Busy):
        await locks.acquire("s", "main")
    await second.release()
    assert await locks.held("s") == set()


async def test_wait_takes_the_branch_once_the_holder_lets_go_in_order() -> None:
    locks = LocalBranchLocks()
    first = await locks.acquire("s", "main")
    order: list[str] = []
    inside: set[str] = set()

    async def waiter(name: str) -> None:
        async with locks.hold("s", "main", wait=True):
            assert not inside, f"{name} entered while {inside} held the branch"
            inside.add(name)
            order.append(name)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            inside.discard(name)

    tasks = [asyncio.create_task(waiter("a")), asyncio.create_task(waiter("b"))]
    await asyncio.sleep(0)
    assert order == []  # still held
    await first.release()
    await asyncio.gather(*tasks)
    assert sorted(order) == ["a", "b"]  # one after the other, never both at once
    assert await locks.held("s") == set()

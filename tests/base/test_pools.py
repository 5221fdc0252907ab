"""The thread pools of `server/base/pools.py`: an idle pool's threads go, no work is ever left
without a thread, and a lane runs its work in order, one item at a time."""

from __future__ import annotations

import threading
import time
from concurrent.futures import wait

from server.base.pools import IdlingThreadPool, SerialLane


def pool_threads(name: str) -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith(name))


def test_threads_grow_with_work_up_to_the_bound_and_go_when_idle() -> None:
    pool = IdlingThreadPool(max_workers=4, idle_seconds=0.3, name="t-grow")
    gate = threading.Event()
    futures = [pool.submit(gate.wait, 10) for _ in range(10)]
    time.sleep(0.2)
    assert pool_threads("t-grow") == 4  # ten blocked jobs, four threads
    gate.set()
    wait(futures, timeout=10)
    assert all(f.result() for f in futures)
    deadline = time.monotonic() + 10
    while pool_threads("t-grow") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool_threads("t-grow") == 0
    # Work after the threads went starts a thread again.
    assert pool.submit(lambda: 7).result(timeout=10) == 7
    pool.shutdown()
    assert pool_threads("t-grow") == 0


def test_no_work_is_lost_when_threads_time_out_while_work_arrives() -> None:
    # Submits timed around the idle timeout: a thread leaving must not strand a job.
    pool = IdlingThreadPool(max_workers=2, idle_seconds=0.01, name="t-race")
    done = []
    for i in range(300):
        done.append(pool.submit(lambda i=i: i))
        if i % 7 == 0:
            time.sleep(0.011)
    assert [f.result(timeout=10) for f in done] == list(range(300))
    pool.shutdown()


def test_errors_reach_the_caller_and_the_thread_goes_on() -> None:
    pool = IdlingThreadPool(max_workers=1, idle_seconds=1, name="t-err")
    failing = pool.submit(lambda: 1 / 0)
    assert isinstance(failing.exception(timeout=10), ZeroDivisionError)
    assert pool.submit(lambda: "ok").result(timeout=10) == "ok"
    pool.shutdown()


def test_a_lane_runs_in_order_one_at_a_time_beside_other_lanes() -> None:
    pool = IdlingThreadPool(max_workers=4, idle_seconds=1, name="t-lane")
    lanes = [SerialLane(pool) for _ in range(3)]
    seen: dict[int, list[int]] = {0: [], 1: [], 2: []}
    running = [0, 0, 0]
    overlap = []

    def job(lane: int, i: int) -> int:
        running[lane] += 1
        overlap.append(running[lane])
        time.sleep(0.001)
        seen[lane].append(i)
        running[lane] -= 1
        return i

    futures = [lanes[i % 3].submit(lambda lane=i % 3, i=i: job(lane, i)) for i in range(90)]
    assert [f.result(timeout=20) for f in futures] == list(range(90))
    assert max(overlap) == 1  # never two items of one lane at once
    for lane, items in seen.items():
        assert items == sorted(items) and len(items) == 30, lane
    # A lane's error goes to its caller; the lane goes on with the next item.
    bad = lanes[0].submit(lambda: 1 / 0)
    after = lanes[0].submit(lambda: "next")
    assert isinstance(bad.exception(timeout=10), ZeroDivisionError)
    assert after.result(timeout=10) == "next"
    pool.shutdown()


def test_a_waiting_thread_keeps_nothing_of_its_last_job() -> None:
    """A job's function and arguments go when it is done, not when the next job comes: a
    bound method would keep its object (a closed session's object writer) alive."""
    import gc
    import weakref

    class Job:
        def run(self, payload: bytes) -> int:
            return len(payload)

    pool = IdlingThreadPool(max_workers=1, idle_seconds=30, name="t-keep")
    job = Job()
    gone = weakref.ref(job)
    assert pool.submit(job.run, b"x" * 1000).result(timeout=10) == 1000
    del job
    time.sleep(0.1)  # the thread is back to waiting
    gc.collect()
    assert pool_threads("t-keep") == 1 and gone() is None
    pool.shutdown()

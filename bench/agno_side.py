"""agno 3.1.10's side of bench/checkpoint.py, run by the python of a throwaway venv that
holds agno (never imported by Braid or its tests).

No model is called: the run is driven through agno's own checkpoint path, as its agent loop
drives it with `checkpoint="tool-batch"`: after each tool batch `checkpoint_run` (the run
RUNNING, its messages so far, into the session row and the run row of `SqliteDb`), at the
end `cleanup_and_store` (the finished run). The run's shape is Braid's side's: a user
message, 5 tool batches (an assistant tool call carrying 2 KB, its result) and an answer.

Protocol (one JSON object a line): stdin `{"runs": N}` makes N runs and answers
`{"ms": [per-checkpoint milliseconds of each run], "db_bytes": ...}`; end of input ends it.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid

from agno.agent import Agent
from agno.agent._run import checkpoint_run, cleanup_and_store
from agno.db.sqlite import SqliteDb
from agno.models.message import Message
from agno.run import RunStatus
from agno.run.agent import RunOutput
from agno.session import AgentSession

BATCHES = 5
PAYLOAD = 2048


def one_run(agent: Agent, session: AgentSession, n: int) -> list[float]:
    run = RunOutput(run_id=str(uuid.uuid4()), session_id=session.session_id,
                    agent_id=agent.id, status=RunStatus.running,
                    messages=[Message(role="user", content=f"write the files, run {n}")])
    times: list[float] = []
    for b in range(BATCHES):
        call_id = f"call_{n}_{b}"
        args = json.dumps({"path": f"f{b}.txt", "content": "x" * PAYLOAD})
        run.messages.append(Message(role="assistant", content="", tool_calls=[
            {"id": call_id, "type": "function",
             "function": {"name": "write_file", "arguments": args}}]))
        run.messages.append(Message(role="tool", tool_call_id=call_id,
                                    content=f"wrote {PAYLOAD} bytes"))
        start = time.perf_counter()
        checkpoint_run(agent, run, session)
        times.append(time.perf_counter() - start)
    run.messages.append(Message(role="assistant", content=f"done: wrote {BATCHES} files"))
    run.status = RunStatus.completed
    start = time.perf_counter()
    cleanup_and_store(agent, run, session)
    times.append(time.perf_counter() - start)
    return [t * 1000 for t in times]


def main() -> None:
    folder = sys.argv[1]
    db_file = os.path.join(folder, "agno.sqlite3")
    agent = Agent(db=SqliteDb(db_file=db_file), checkpoint="tool-batch",
                  session_id=str(uuid.uuid4()))
    session = AgentSession(session_id=agent.session_id, agent_id=agent.id, session_data={},
                           runs=[], created_at=int(time.time()))
    made = 0
    for line in sys.stdin:
        ask = json.loads(line)
        out = [one_run(agent, session, made + i) for i in range(int(ask["runs"]))]
        made += int(ask["runs"])
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)
                   if f.startswith("agno.sqlite3"))
        print(json.dumps({"ms": out, "db_bytes": size}), flush=True)


if __name__ == "__main__":
    main()

"""The sub-agents' cards in their parent's bubble, over the real socket's HTML frames and the
page as HTTP serves it, against a real uvicorn server and the demo model (issue 25): the
model's spawn appends a card per child to the parent's bubble, a child's checkpoint redraws
the graph, its end redraws its card with its tokens; the page drawn afresh holds the cards
from the records alone; Transcript's `dag/node/tip?branch=` shows the child's chat."""

from __future__ import annotations

import json
import re

from websockets.sync.client import connect

from conftest import Server

SPAWN = ("spawn red: write red.txt red\\nsay red done\n"
         "spawn blue: write blue.txt blue\\nsay blue done\nsay both done")


def test_the_models_spawn_draws_cards_in_the_parents_bubble(shared_server: Server) -> None:
    srv = shared_server
    sid = srv.new_session()
    with connect(f"{srv.ws_url}/ws/sessions/{sid}?format=html",
                 additional_headers={"Authorization": f"Bearer {srv.token}"}) as ws:
        run = srv.run(sid, SPAWN)
        assert run["status"] == "COMPLETED", run
        frames: list[str] = []
        parent = run["run_id"]
        while not any(f'id="turn-{parent}"' in f and 'data-status="COMPLETED"' in f
                      for f in frames):
            frames.append(ws.recv(timeout=20))
    text = "".join(frames)
    # sub_agent_started: a card appended to the parent's bubble, by the contract's fields.
    started = re.findall(rf'<div id="children-{parent}" hx-swap-oob="beforeend" data-turn-part>\s*'
                         r'<div class="sub-card" id="sub-card-(\w+)"[^>]*data-status="RUNNING"'
                         rf'[^>]*data-parent="{parent}" data-call-id="(\w+)"', text)
    assert len(started) == 2, text[:3000]
    children = {rid for rid, _ in started}
    assert len({call for _, call in started}) == 1  # one spawn_sub_agents call
    # The children's checkpoints redraw the graph as their lanes grow.
    assert text.count('<div id="dag"') >= 4
    # Each child's end redraws its card: done, its file, its tokens.
    for rid in children:
        end = next(f for f in frames if f'id="sub-card-{rid}"' in f and
                   'data-status="COMPLETED"' in f)
        assert re.search(r'data-tokens="[1-9]\d*"', end) and "tokens</span>" in end
        assert re.search(r'class="chip chip-added" data-path="(red|blue).txt"', end)
        assert f'id="turn-{rid}"' not in text  # a child is never a turn of the transcript
    # The parent's own end keeps the cards (from its tool result), tokens read from records.
    done = next(f for f in frames if f'id="turn-{parent}"' in f and
                'data-status="COMPLETED"' in f)
    assert all(f'id="sub-card-{rid}"' in done for rid in children)
    assert re.search(rf'id="child-total-{parent}">2 sub-agents · [1-9]\d* tokens<', done)
    assert "sub_" not in re.sub(r'(title|data-[\w-]+|value)="[^"]*"', "", done.split(
        f'id="children-{parent}"')[1].split("child-total")[0])  # labels, never branch ids

    # The page drawn afresh (no event seen): the same cards, from the records.
    status, page = srv.page(f"/s/{sid}")
    assert status == 200
    cards = re.findall(r'<div class="sub-card" id="sub-card-(\w+)"[^>]*data-status="(\w+)"', page)
    assert {rid for rid, _ in cards} == children and {s for _, s in cards} == {"COMPLETED"}
    assert re.search(rf'id="child-total-{parent}">2 sub-agents · [1-9]\d* tokens<', page)
    branch = re.search(r'data-branch="(sub_\w+_red_\w+)"', page)
    assert branch is not None

    # Transcript: the child's branch's newest node, its own chat; an unknown branch is 404.
    status, node = srv.page(f"/s/{sid}/dag/node/tip?branch={branch.group(1)}")
    assert status == 200 and "write red.txt red" in node and "red.txt" in node
    assert "blue.txt" not in node
    assert srv.page(f"/s/{sid}/dag/node/tip?branch=nope")[0] == 404
    assert srv.page(f"/s/{sid}/dag/node/tip")[0] == 404


def test_a_page_opened_mid_spawn_streams_the_child_and_a_stop_cancels_it(
        shared_server: Server) -> None:
    """The user's spawn: its card in the turn it came from, the text so far on a page opened
    mid-run; cancel_run with the child's run id ends it CANCELLED and its card says so."""
    srv = shared_server
    sid = srv.new_session()
    turn_id = srv.run(sid, "say hi")["run_id"]
    with connect(f"{srv.ws_url}/ws/sessions/{sid}?format=json",
                 additional_headers={"Authorization": f"Bearer {srv.token}"}) as js:
        js.send(json.dumps({"action": "spawn_sub_agent", "parent_turn_id": turn_id,
                            "label": "slowpoke",
                            "prompt": "slow 200\nsay " + " ".join(["word"] * 200)}))
        child = ""
        while not child:
            frame = js.recv(timeout=20)
            if '"sub_agent_started"' in frame:
                child = json.loads(frame)["data"]["run_id"]
        while '"message_delta"' not in js.recv(timeout=20):
            pass
        status, page = srv.page(f"/s/{sid}")
        card = page.split(f'id="sub-card-{child}"')[1].split('<div class="sub-card"')[0]
        assert 'data-status="RUNNING"' in card and 'name="action" value="cancel_run"' in card
        assert re.search(r'<div class="live-block">(word ?)+</div>', card)
        assert f'data-parent="{turn_id}"' in page.split(f'id="sub-card-{child}"')[1][:600]
        with connect(f"{srv.ws_url}/ws/sessions/{sid}?format=html",
                     additional_headers={"Authorization": f"Bearer {srv.token}"}) as ws:
            js.send(json.dumps({"action": "cancel_run", "run_id": child}))
            frames = []
            while not any(f'id="sub-card-{child}"' in f and 'data-status="CANCELLED"' in f
                          for f in frames):
                frames.append(ws.recv(timeout=20))
            assert ">cancelled<" in frames[-1]
            # Its result turn on the parent branch comes after the child's end event.
            while "stopped (cancelled)" not in "".join(frames):
                frames.append(ws.recv(timeout=20))
    status, page = srv.page(f"/s/{sid}")
    assert re.search(rf'id="sub-card-{child}"[^>]*data-status="CANCELLED"', page)


def test_a_childs_own_children_are_cards_in_its_card(shared_server: Server) -> None:
    """Depth: a child that spawns gets its children's cards in its own card, live and in its
    end's redraw (from its tool result)."""
    srv = shared_server
    sid = srv.new_session()
    with connect(f"{srv.ws_url}/ws/sessions/{sid}?format=html",
                 additional_headers={"Authorization": f"Bearer {srv.token}"}) as ws:
        run = srv.run(sid, "spawn outer: spawn inner: say deep")
        assert run["status"] == "COMPLETED", run
        frames: list[str] = []
        parent = run["run_id"]
        while not any(f'id="turn-{parent}"' in f and 'data-status="COMPLETED"' in f
                      for f in frames):
            frames.append(ws.recv(timeout=20))
    text = "".join(frames)
    outer = re.search(rf'<div id="children-{parent}" hx-swap-oob="beforeend" data-turn-part>\s*'
                      r'<div class="sub-card" id="sub-card-(\w+)"', text)
    assert outer is not None
    inner = re.search(rf'<div id="children-{outer.group(1)}" '
                      rf'hx-swap-oob="beforeend" data-turn-part>\s*'
                      rf'<div class="sub-card" id="sub-card-(\w+)"[^>]*data-parent='
                      rf'"{outer.group(1)}"', text)
    assert inner is not None, text[:4000]
    # The outer child's end draws its card with the inner one inside, done.
    end = next(f for f in frames if f.lstrip().startswith(f'<div class="sub-card" id="sub-card-'
                                                          f'{outer.group(1)}"')
               and 'data-status="COMPLETED"' in f.split(">", 1)[0])
    nested = end.split(f'id="children-{outer.group(1)}"')[1]
    assert re.search(rf'id="sub-card-{inner.group(1)}"[^>]*data-status="COMPLETED"', nested)
    assert ">inner<" in nested and "deep" in nested

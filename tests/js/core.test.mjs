// Unit tests of the page's core (static/core.js) under Node's test runner: `node --test
// tests/js/` (scripts/test runs it). They take the core's pure parts, which hold the page's
// decisions: which Esc handler wins, how streamed text is joined and cut into blocks, which
// frames are data, which toasts stay. The browser tests (playwright/) take the rest.
import assert from "node:assert/strict";
import {test} from "node:test";

import {DeltaBuffer, Keymap, ToastShelf, cutBlock, dataFrame} from "../../static/core.js";

function key(k, extra) {
  const e = {key: k, prevented: false, isComposing: false, ...extra};
  e.preventDefault = function () { e.prevented = true; };
  return e;
}

test("Escape runs the innermost open thing only, in order, whatever the binding order", () => {
  const km = new Keymap();
  const ran = [];
  const open = {menu: true, file: true};
  km.bind("Escape", {name: "stop", order: 100, run: () => ran.push("stop")});
  km.bind("Escape", {name: "menu", order: 40, when: () => open.menu, run: () => { open.menu = false; }});
  km.bind("Escape", {name: "file", order: 20, when: () => open.file, run: () => { open.file = false; }});
  const first = key("Escape");
  assert.equal(km.handle(first), "file");
  assert.ok(first.prevented);
  assert.equal(km.handle(key("Escape")), "menu");
  assert.deepEqual(ran, []);  // nothing was stopped while something was open
  assert.equal(km.handle(key("Escape")), "stop");
  assert.deepEqual(ran, ["stop"]);
});

test("a native binding ends the key's handling but lets the browser act", () => {
  const km = new Keymap();
  let stopped = false;
  km.bind("Escape", {name: "dialog", order: 30, native: true, when: () => true});
  km.bind("Escape", {name: "stop", order: 100, run: () => { stopped = true; }});
  const e = key("Escape");
  assert.equal(km.handle(e), "dialog");
  assert.equal(e.prevented, false);  // the dialog closes by the browser's own Esc
  assert.equal(stopped, false);
});

test("keys are told apart, an IME composition is left alone, an unbind takes effect", () => {
  const km = new Keymap();
  const unbind = km.bind("Enter", {name: "send", when: (e) => !e.shiftKey});
  assert.equal(km.handle(key("Enter", {shiftKey: true})), null);
  assert.equal(km.handle(key("Enter", {isComposing: true})), null);
  assert.equal(km.handle(key("Escape")), null);
  assert.equal(km.handle(key("Enter")), "send");
  unbind();
  assert.equal(km.handle(key("Enter")), null);
});

test("deltas are joined per element in arrival order and taken once", () => {
  const buf = new DeltaBuffer();
  buf.add("live-a", "Hel");
  buf.add("live-b", "x");
  buf.add("live-a", "lo <b>&amp;</b>");
  assert.equal(buf.size, 2);
  const batch = buf.take();
  assert.deepEqual([...batch.entries()], [["live-a", "Hel" + "lo <b>&amp;</b>"], ["live-b", "x"]]);
  assert.equal(buf.size, 0);
  assert.equal(buf.take().size, 0);  // a second flush of the same frame appends nothing twice
});

test("a block is cut after its last line end, else its last space, never mid-word", () => {
  assert.equal(cutBlock("short", 10), -1);
  const lines = "a".repeat(8) + "\n" + "b".repeat(5);
  assert.equal(cutBlock(lines, 10), 8);
  // The only line end is too early: the last space is taken instead.
  const spaced = "a\n" + "b".repeat(10) + " " + "c".repeat(4);
  assert.equal(cutBlock(spaced, 14), 12);
  assert.equal(cutBlock("x".repeat(30), 10), -1);  // one word: kept whole
  assert.equal(cutBlock("x".repeat(30) + " ", 10), -1);  // nothing after the space yet
});

test("data frames are told from HTML frames by their shape, not by a pattern", () => {
  const text = '<b>not html</b> "quoted" & \n';
  assert.deepEqual(dataFrame(JSON.stringify({frame: "append", id: "live-r1", text})),
    {frame: "append", id: "live-r1", text});
  assert.equal(dataFrame('<div id="transcript" hx-swap-oob="beforeend"></div>'), null);
  assert.equal(dataFrame("{not json"), null);
  assert.equal(dataFrame('{"action": "x"}'), null);  // JSON but no frame kind
  assert.equal(dataFrame(null), null);
});

test("toasts: the same words replace the old one, at most three pass by, sticky ones stay", () => {
  const shelf = new ToastShelf(3, 5000);
  assert.deepEqual(shelf.add("t1", "Run failed: boom", false, 0), []);
  assert.deepEqual(shelf.add("t2", "Run failed: boom", false, 10), ["t1"]);  // not stacked
  shelf.add("s1", "Later changes overlap", true, 20);
  shelf.add("t3", "b", false, 30);
  shelf.add("t4", "c", false, 40);
  assert.deepEqual(shelf.add("t5", "d", false, 50), ["t2"]);  // the oldest passing one goes
  assert.deepEqual(shelf.shown.map((t) => t.key), ["s1", "t3", "t4", "t5"]);
  assert.deepEqual(shelf.expired(5029), []);
  assert.deepEqual(shelf.expired(5030), ["t3"]);
  assert.deepEqual(shelf.expired(1e12), ["t3", "t4", "t5"]);  // never the sticky one
});

// Streaming, and following the end of the transcript.
//
// A streamed chunk is a data frame `{"frame": "append", "id": "live-RUN", "text": ...}`
// (never HTML). Handing each to htmx (parse, swap an element in, settle) and laying the page
// out for it made every word cost more than the one before. Here the chunks of a frame's
// worth of time are joined and appended as text to their element once per animation frame,
// in blocks (core.appendText), so appending lays out only the last block; the server's
// Markdown replaces the live block when the answer is complete (run_completed).
import {$, $$, DeltaBuffer, appendText, feature, socket} from "./core.js";

const BLOCK_CHARS = 2000;
const buffer = new DeltaBuffer();
let flushAsked = false;

function nearBottom(el) {
  return el.scrollHeight - el.scrollTop - el.clientHeight < 160;
}

export function scrollToEnd(force) {
  const t = $("#transcript");
  // An empty session has nothing to follow: its start (the demo model's help) stays in view.
  if (t && !t.querySelector("section.turn") && $("#empty-state", t)) return;
  if (t && (force || t.dataset.follow !== "0")) t.scrollTop = t.scrollHeight;
}

// Following the end costs one layout a frame, not one per change: changes (a streamed
// chunk, a swapped turn) only ask for it, and it happens once before the next paint, and
// only while the reader is at the bottom (data-follow, kept by the scroll handler).
let scrollAsked = false;
export function askScroll() {
  if (scrollAsked) return;
  scrollAsked = true;
  requestAnimationFrame(function () { scrollAsked = false; scrollToEnd(false); });
}

function flush() {
  flushAsked = false;
  if (!buffer.size) return;
  buffer.take().forEach(function (text, id) {
    const el = document.getElementById(id);
    if (el) appendText(el, text, BLOCK_CHARS);  // a turn the page does not show: nothing to do
  });
  askScroll();
}

function onAppend(f) {
  if (typeof f.id !== "string" || typeof f.text !== "string") return;
  buffer.add(f.id, f.text);
  if (!flushAsked) {
    flushAsked = true;
    requestAnimationFrame(flush);
    setTimeout(flush, 100);  // a tab in the background gets no animation frames
  }
}

function follow(t) {
  // Delegated: a redraw replaces the transcript element (and would drop its listener).
  // The reader leaves the end by scrolling up (wheel, touch, keys, the scroll bar); back near
  // the end, it follows again. Only an upward scroll soon after the reader's own input counts:
  // the browser also scrolls up by itself (keeping the view in place as old turns above get
  // their real height once laid out), and that must not stop the following.
  const lastTop = new WeakMap();
  let readerUntil = 0;
  function readerMoved(e) {
    const tr = $("#transcript");
    if (!tr || (e.target instanceof Node && !tr.contains(e.target) && e.type !== "keydown")) return;
    if (e.type === "keydown" && !/^(ArrowUp|PageUp|Home)$/.test(e.key)) return;
    readerUntil = performance.now() + 1000;
  }
  ["wheel", "touchmove", "pointerdown", "keydown"].forEach(function (type) {
    document.addEventListener(type, readerMoved, {capture: true, passive: true});
  });
  document.addEventListener("scroll", function (e) {
    const el = e.target;
    if (!el || el.id !== "transcript") return;
    const top = el.scrollTop;
    const before = lastTop.has(el) ? lastTop.get(el) : top;
    lastTop.set(el, top);
    if (nearBottom(el)) el.dataset.follow = "1";
    else if (top < before - 1 && performance.now() < readerUntil) el.dataset.follow = "0";
  }, true);
  new MutationObserver(askScroll).observe(document.querySelector(".main") || t, {childList: true, subtree: true});
  scrollToEnd(true);
}

feature("stream", function () {
  socket.onData("append", onAppend);
  socket.beforeHtml(flush);  // what came before an HTML frame is shown before it is swapped in
  document.addEventListener("htmx:wsOpen", function () { if (socket.opened > 1) scrollToEnd(true); });
  // An error toast goes once a later run completes: it no longer says how things stand.
  // Toasts that offer an action stay until dismissed.
  document.addEventListener("htmx:oobBeforeSwap", function (e) {
    const d = e.detail;
    if (!d || !d.target || !d.fragment || d.target.dataset.status !== "RUNNING") return;
    const ended = Array.from(d.fragment.children || []).some(function (el) {
      return el.matches("section.turn[data-status=COMPLETED]");
    });
    if (!ended) return;
    $$("#toasts .toast-error:not(.toast-sticky)").forEach(function (t) { t.remove(); });
  });
  const t = $("#transcript");
  if (t) follow(t);
});

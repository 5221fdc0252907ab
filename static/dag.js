// The DAG panel: collapse/expand (remembered), ticked branches kept across re-renders, a
// turn's spawn form (drawn once a page, _turn_pops.html, put in the menu opened) closing after
// it is sent, a click on a graph dot opening that node, closing the node/conflict boxes, and a
// fresh graph after a reconnect. Everything else is htmx.
import {feature, fillOnce, keymap, on} from "./core.js";
const KEY = "braid.dag.collapsed";
const ticked = new Set();
let opened = 0;

// Its fields' ids name the turn (spawn-prompt-<turn>, spawn-label-<turn>).
export function fillSpawn(menu) {
  const rid = menu.id.slice("spawn-".length);
  fillOnce(menu, "spawn-pop-template", ".spawn-form", function (form) {
    const turn = menu.closest("section.turn");
    form.querySelector("input[name=parent_turn_id]").value = turn ? turn.dataset.runId : "";
    form.querySelectorAll("label[data-for]").forEach(function (label) {
      const field = form.querySelector("[name=" + label.dataset.for + "]");
      field.id = "spawn-" + label.dataset.for + "-" + rid;
      label.htmlFor = field.id;
    });
  });
}

function panel() { return document.getElementById("dag-panel"); }
function isPhone() { return !!window.matchMedia && window.matchMedia("(max-width: 760px)").matches; }

function setCollapsed(collapsed) {
  const p = panel();
  if (!p) return;
  p.classList.toggle("collapsed", collapsed);
  document.body.classList.toggle("dag-collapsed", collapsed);
  const btn = p.querySelector("[data-toggle-dag]");
  if (btn) btn.setAttribute("aria-expanded", collapsed ? "false" : "true");
  try { localStorage.setItem(KEY, collapsed ? "1" : "0"); } catch (err) { /* private mode */ }
}

function restoreTicks() {
  document.querySelectorAll("#dag input[name=branches]").forEach(function (box) {
    box.checked = !box.disabled && ticked.has(box.value);
  });
  syncMerge();
}

// Merge is for ticked branches: with none ticked there is nothing to press.
function syncMerge() {
  const btn = document.getElementById("merge-btn");
  if (!btn) return;
  const none = !document.querySelector("#dag input[name=branches]:checked");
  btn.disabled = none;
  btn.title = none ? "Tick the branches to merge" : "";
}

function refreshDag() {
  const p = panel();
  if (!p || !window.htmx) return;
  htmx.ajax("GET", "/s/" + p.dataset.sessionId + "/dag", {target: "#dag", swap: "outerHTML"});
}

feature("dag", function () {
  on("click", "details.spawn > summary", function (e, summary) { fillSpawn(summary.parentElement); });
  document.addEventListener("change", function (e) {
    const box = e.target;
    if (box && box.name === "branches" && box.closest("#dag")) {
      if (box.checked) ticked.add(box.value); else ticked.delete(box.value);
      syncMerge();
      // Another set of branches is another merge: the conflict editors were for the last.
      const conflicts = document.getElementById("dag-conflicts");
      if (conflicts) conflicts.innerHTML = "";
    }
  });

  document.addEventListener("click", function (e) {
    const t = e.target;
    if (!t || !t.closest) return;
    if (t.closest("[data-toggle-dag]")) { setCollapsed(!panel().classList.contains("collapsed")); return; }
    if (t.closest("[data-close-dag]")) { setCollapsed(true); document.querySelector("#dag-panel .dag-toggle").focus(); return; }
    const close = t.closest(".dag-close");
    if (close) {
      const box = document.querySelector(close.dataset.close);
      if (box) box.innerHTML = "";
      return;
    }
    const dot = t.closest(".dag-dot");
    if (dot) {
      const row = document.querySelector('.dag-node[data-id="' + dot.dataset.id + '"]');
      if (row) { row.click(); row.focus(); }
    }
  });

  document.addEventListener("htmx:wsAfterSend", function (e) {
    const form = e.target && e.target.closest ? e.target.closest("form") : null;
    if (!form) return;
    if (form.classList.contains("spawn-form")) {
      form.reset();
      const details = form.closest("details");
      if (details) details.open = false;
    }
    if (form.classList.contains("dag-continue")) {
      const detail = document.getElementById("dag-detail");
      if (detail) detail.innerHTML = "";
    }
  });

  // The ticks and the message stay until the merge is made (a refused merge keeps them, so
  // picking "take theirs" and pressing Merge again just works).
  function mergeDone() {
    const form = document.getElementById("merge-form");
    ticked.clear();
    if (!form) return;
    form.querySelectorAll("input[name=branches]").forEach(function (b) { b.checked = false; });
    syncMerge();
    const message = form.querySelector("#merge-message");
    if (message) message.value = "";
    const conflicts = document.getElementById("dag-conflicts");
    if (conflicts) conflicts.innerHTML = "";  // its editors belong to the merge just made
  }

  // The merge form carries the conflict editors' results only when "Merge with your files"
  // sends it, and only the files the user edited (or resolved before): an untouched editor
  // still holds conflict markers, and Merge with a strategy means that strategy.
  document.addEventListener("htmx:wsConfigSend", function (e) {
    const d = e.detail, ev = d && d.triggeringEvent;
    if (!ev || !ev.target || ev.target.id !== "merge-form") return;
    const paths = [], texts = [];
    if (ev.submitter && ev.submitter.id === "merge-resolved-btn") {
      document.querySelectorAll("#dag-conflicts textarea.conflict-result").forEach(function (t) {
        if (t.value !== t.defaultValue || t.dataset.resolved) {
          paths.push(t.dataset.path);
          texts.push(t.value);
        }
      });
    }
    if (paths.length) d.parameters.resolutions = Object.fromEntries(
      paths.map(function (p, i) { return [p, texts[i]]; }));
  });

  // What opens in the panel is brought into view (it may start below the window's end).
  function reveal(el) {
    if (!el || !el.firstElementChild) return;
    el.scrollIntoView({block: "nearest"});
    const focusable = el.querySelector(".dag-close");
    if (focusable) focusable.focus({preventScroll: true});
  }

  document.addEventListener("htmx:oobAfterSwap", function (e) {
    const target = e.detail && e.detail.target;
    if (!target) return;
    if (target.id === "merge-ack") mergeDone();
    if (target.id === "dag-conflicts") reveal(document.getElementById("dag-conflicts"));
  });
  document.addEventListener("htmx:afterSwap", function (e) {
    const target = e.detail && e.detail.target;
    if (target && target.id === "dag-detail") reveal(document.getElementById("dag-detail"));
  });

  // The graph is redrawn on every dag_changed; keep what the user had ticked.
  document.addEventListener("htmx:oobAfterSwap", restoreTicks);
  document.addEventListener("htmx:afterSwap", restoreTicks);

  // On a phone the open panel is a sheet over the page: Esc or a tap beside it closes it.
  function sheetOpen() { const p = panel(); return !!p && isPhone() && !p.classList.contains("collapsed"); }
  keymap.bind("Escape", {name: "close-history-sheet", order: 55, when: sheetOpen,
    run: function () { setCollapsed(true); }});
  document.addEventListener("click", function (e) {
    const t = e.target;
    if (!sheetOpen() || !(t instanceof Element) || panel().contains(t)) return;
    if (t.closest("#toasts, dialog, [data-open-child], [data-toggle-dag]")) return;
    setCollapsed(true);
  });

  document.addEventListener("htmx:wsOpen", function () {
    opened += 1;
    if (opened > 1) refreshDag();  // events sent while the socket was down are lost
  });

  (function () {
    let collapsed = false;
    try { collapsed = localStorage.getItem(KEY) === "1"; } catch (err) { /* private mode */ }
    // On a phone the panel is an overlay: always start closed.
    if (isPhone()) collapsed = true;
    setCollapsed(collapsed);
  })();
});

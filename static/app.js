// Braid page behaviour that htmx does not cover: connection indicator and catch-up after a
// reconnect (asked of the server), Enter to send, toasts, auto-scroll, the phone sidebar.
(function () {
  "use strict";
  let opened = 0;

  function $(sel, root) { return (root || document).querySelector(sel); }

  function setConn(state, text) {
    const el = $("#conn");
    if (!el) return;
    el.className = "conn conn-" + state;
    el.dataset.state = state;
    const label = $(".conn-text", el);
    if (label) label.textContent = text;
  }

  function nearBottom(el) {
    return el.scrollHeight - el.scrollTop - el.clientHeight < 160;
  }

  function scrollToEnd(force) {
    const t = $("#transcript");
    // An empty session has nothing to follow: its start (the demo model's help) stays in view.
    if (t && !t.querySelector("section.turn") && $("#empty-state", t)) return;
    if (t && (force || t.dataset.follow !== "0")) t.scrollTop = t.scrollHeight;
  }

  // Following the end costs one layout a frame, not one per change: changes (a streamed
  // chunk, a swapped turn) only ask for it, and it happens once before the next paint, and
  // only while the reader is at the bottom (data-follow, kept by the scroll handler).
  let scrollAsked = false;
  function askScroll() {
    if (scrollAsked) return;
    scrollAsked = true;
    requestAnimationFrame(function () { scrollAsked = false; scrollToEnd(false); });
  }

  // Streaming: a message_delta frame is `<div id="live-RUN" hx-swap-oob="beforeend"><span>
  // escaped text</span></div>`. Handing each to htmx (parse, swap an element in, settle, the
  // wsAfterMessage handlers) and laying the page out for it made every word cost more than
  // the one before. Here the deltas of a frame's worth of time are joined and appended as
  // text (never parsed as HTML) to the live block once per animation frame; the server's
  // Markdown replaces the block when the answer is complete (run_completed). The live text is
  // cut into blocks at line ends (or, on one very long line, at a space) so that appending
  // lays out only the last block, not the whole answer so far.
  const DELTA = /^<div id="(live-[\w-]+)" hx-swap-oob="beforeend"><span>([^<]*)<\/span><\/div>$/;
  const ENTITIES = {"&amp;": "&", "&lt;": "<", "&gt;": ">", "&#34;": '"', "&#39;": "'", "&quot;": '"'};
  const BLOCK_CHARS = 2000;
  let pending = new Map();  // live element id -> text not yet shown
  let flushAsked = false;

  function unescapeText(s) {
    return s.indexOf("&") === -1 ? s : s.replace(/&(?:amp|lt|gt|quot|#34|#39);/g, function (e) { return ENTITIES[e]; });
  }

  function appendLive(live, text) {
    let block = live.lastElementChild;
    if (!block || !block.classList.contains("live-block")) {
      // The page drew the text so far (a reload mid-stream): it becomes the first block.
      block = document.createElement("div");
      block.className = "live-block";
      block.append(document.createTextNode(live.textContent));
      live.replaceChildren(block);
    }
    let node = block.lastChild;
    if (!node || node.nodeType !== 3) { node = document.createTextNode(""); block.append(node); }
    node.appendData(text);
    if (node.length > BLOCK_CHARS) {
      // Start a new block after the last line end (else the last space) of this one.
      const data = node.data;
      let cut = data.lastIndexOf("\n");
      if (cut < BLOCK_CHARS / 2) cut = data.lastIndexOf(" ");
      if (cut > 0 && cut < data.length - 1) {
        const next = document.createElement("div");
        next.className = "live-block";
        next.append(document.createTextNode(data.slice(cut + 1)));
        node.deleteData(cut + 1, data.length - cut - 1);
        live.append(next);
      }
    }
  }

  function flushDeltas() {
    flushAsked = false;
    if (!pending.size) return;
    const batch = pending;
    pending = new Map();
    batch.forEach(function (text, id) {
      const live = document.getElementById(id);
      if (live) appendLive(live, text);  // a turn the page does not show: nothing to do
    });
    askScroll();
  }

  document.addEventListener("htmx:wsBeforeMessage", function (e) {
    const message = e.detail && e.detail.message;
    const m = typeof message === "string" && message.length < 200000 ? DELTA.exec(message) : null;
    if (!m) {
      flushDeltas();  // what came before this frame is shown before it is swapped in
      return;
    }
    e.preventDefault();
    pending.set(m[1], (pending.get(m[1]) || "") + unescapeText(m[2]));
    if (!flushAsked) {
      flushAsked = true;
      requestAnimationFrame(flushDeltas);
      setTimeout(flushDeltas, 100);  // a tab in the background gets no animation frames
    }
  });

  // A turn is appended once: an event that reaches the page twice around a reconnect (the
  // catch-up drew the turn, then its run_started arrives) must not draw a second copy with
  // the same id, which every later frame would miss.
  document.addEventListener("htmx:oobBeforeSwap", function (e) {
    const d = e.detail;
    if (!d || !d.target || d.target.id !== "transcript" || !d.fragment) return;
    d.fragment.querySelectorAll(":scope > section.turn[id]").forEach(function (s) {
      if (document.getElementById(s.id)) s.remove();
    });
  });

  // The server's first frame on a socket is a catch-up, in order with the events after it
  // (a fetch of the page would race with them). The first socket names the runs the page
  // shows as running; a reconnect, which may have missed events, asks for a full redraw.
  function catchUpQuery() {
    if (opened > 0) return "&catchup=full";
    // Sub-agents' cards too: each is redrawn as it is now (it may have ended meanwhile).
    const live = Array.from(document.querySelectorAll(
      "#transcript > section.turn[data-status=RUNNING], #transcript .sub-card[data-status=RUNNING]"))
      .map(function (t) { return t.dataset.runId; }).filter(Boolean);
    return live.length ? "&live=" + encodeURIComponent(live.join(",")) : "";
  }
  if (window.htmx && htmx.createWebSocket) {
    const create = htmx.createWebSocket;
    htmx.createWebSocket = function (url) { return create(url + catchUpQuery()); };
  }

  document.addEventListener("htmx:wsConnecting", function () {
    if (opened) setConn("reconnecting", "Reconnecting…");
  });
  document.addEventListener("htmx:wsOpen", function () {
    opened += 1;
    setConn("open", "Connected");
    if (opened > 1) scrollToEnd(true);
  });
  document.addEventListener("htmx:wsClose", function () { setConn("reconnecting", "Reconnecting…"); });
  document.addEventListener("htmx:wsError", function () { setConn("reconnecting", "Reconnecting…"); });

  // The composer: the text stays until the server accepts it (a refused send loses
  // nothing), Send waits while a run goes, and the draft of each session survives a reload.
  let sending = null;
  function draftKey() { const app = $("#app"); return app ? "braid.draft." + app.dataset.sessionId : null; }
  function saveDraft(text) {
    const key = draftKey();
    if (!key) return;
    try { if (text) localStorage.setItem(key, text); else localStorage.removeItem(key); } catch (err) { /* private mode */ }
  }
  function isRunning() { const rs = $("#run-state"); return !!rs && rs.dataset.running === "1"; }
  function syncComposer() {
    const btn = $("#send-btn");
    const hint = $("#composer-hint");
    const queue = $("#composer-queue");
    const running = isRunning();
    // While a run goes, Send queues the message (send_message {queue: true}): it runs when
    // the agent is free, and waits below the transcript meanwhile (Edit, Remove).
    if (queue) queue.value = running ? "true" : "false";
    if (btn) {
      btn.disabled = sending !== null;
      btn.title = running ? "A run is going: Send queues the message (Esc stops the run)" : "Send (Enter)";
    }
    if (hint) hint.textContent = running ? "The agent is working. Send queues your message; Esc stops it." : "";
  }
  document.addEventListener("htmx:wsAfterSend", function (e) {
    const form = e.target && e.target.closest ? e.target.closest("#composer") : null;
    if (form) {
      sending = $("textarea", form).value;
      syncComposer();
      scrollToEnd(true);
    }
  });
  document.addEventListener("htmx:oobAfterSwap", function (e) {
    const target = e.detail && e.detail.target;
    const id = target && target.id;
    if (id === "composer-ack") {
      const ack = $("#composer-ack");
      const ta = $("#composer-text");
      if (ack && ta && ack.dataset.state === "accepted" && sending !== null) {
        // Typing that came after the send stays.
        ta.value = ta.value.indexOf(sending) === 0 ? ta.value.slice(sending.length).replace(/^\n+/, "") : ta.value;
        saveDraft(ta.value);
        autosize(ta);
      }
      sending = null;
    }
    syncComposer();
  });

  // The queue below the transcript (_queue.html): Edit opens the message inline; what is
  // typed there survives the queue's redraws (queue_changed from this or another tab) until
  // it is saved (update_queued) or the edit is cancelled.
  let editing = null;  // {id, text} of the message being edited
  function editQueued(id, text) {
    document.querySelectorAll("#queue .queued").forEach(function (li) {
      const open = li.dataset.queuedId === id;
      const form = $(".queued-edit", li);
      $(".queued-view", li).hidden = open;
      form.hidden = !open;
      if (open) {
        const ta = $("textarea", form);
        if (text !== undefined) ta.value = text;
        ta.focus();
        const shown = $(".queued-text", li);
        editing = {id: id, text: ta.value, orig: shown ? shown.textContent : ""};
      }
    });
    if (id === null || !document.getElementById("queued-" + id)) editing = null;
  }
  document.addEventListener("input", function (e) {
    if (editing && e.target.closest && e.target.closest(".queued-edit")) editing.text = e.target.value;
  });
  document.addEventListener("submit", function (e) {
    if (e.target.classList && e.target.classList.contains("queued-edit")) editing = null;
    // Before htmx reads the form: queue only when the page knows a run is going.
    if (e.target.id === "composer") syncComposer();
  }, true);
  document.addEventListener("htmx:oobAfterSwap", function (e) {
    const target = e.detail && e.detail.target;
    if (!target || target.id !== "queue" || !editing) return;
    if (document.getElementById("queued-" + editing.id)) { editQueued(editing.id, editing.text); return; }
    // The message started (or another tab removed it) while it was being edited: what was
    // typed is not thrown away but put in the message box, to send as a new message.
    const typed = editing.text.trim();
    const changed = typed !== editing.orig.trim();
    editing = null;
    if (!changed) return;  // nothing typed: the message ran as it was
    const ta = $("#composer-text");
    if (!typed || !ta) return;
    ta.value = ta.value.trim() ? ta.value.replace(/\s*$/, "\n\n") + typed : typed;
    ta.dispatchEvent(new Event("input", {bubbles: true}));  // kept as the draft
    ta.focus();
    const box = document.getElementById("toasts");
    if (box) {
      const t = document.createElement("div");
      t.className = "toast toast-info queued-rescued";
      t.setAttribute("role", "status");
      const span = document.createElement("span");
      span.textContent = "That message started before your edit was saved: your edit is in the message box.";
      const close = document.createElement("button");
      close.type = "button"; close.className = "toast-close"; close.setAttribute("aria-label", "Dismiss"); close.textContent = "×";
      t.append(span, close);
      box.append(t);
    }
  });

  function autosize(ta) {
    ta.style.height = "auto";
    ta.style.height = Math.min(ta.scrollHeight, 240) + "px";
  }

  document.addEventListener("keydown", function (e) {
    const ta = e.target;
    if (ta && ta.id === "composer-text" && e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      if (sending !== null) { syncComposer(); return; }
      if (ta.value.trim()) { syncComposer(); ta.form.requestSubmit(); }
    }
    if (ta && ta.closest && ta.closest(".queued-edit") && !e.isComposing) {
      if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); if (ta.value.trim()) ta.form.requestSubmit(); }
      if (e.key === "Escape") { e.preventDefault(); editQueued(null); }
    }
    if (ta && ta.id === "dag-continue-input" && e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      if (ta.value.trim()) ta.form.requestSubmit();
    }
    if (e.key === "Escape") document.body.classList.remove("sidebar-open");
  });
  document.addEventListener("input", function (e) {
    if (e.target && e.target.id === "composer-text") { autosize(e.target); saveDraft(e.target.value); }
  });

  document.addEventListener("click", function (e) {
    // The demo model's help: an example goes into the message box, ready to send.
    const example = e.target.closest("[data-example]");
    const ta = $("#composer-text");
    if (example && ta) {
      ta.value = example.dataset.example;
      autosize(ta);
      saveDraft(ta.value);
      ta.focus();
      return;
    }
    const edit = e.target.closest("[data-queue-edit]");
    if (edit) { editQueued(edit.closest(".queued").dataset.queuedId); return; }
    if (e.target.closest("[data-queue-cancel]")) { editQueued(null); return; }
    const close = e.target.closest(".toast-close");
    if (close) { close.closest(".toast").remove(); return; }
    if (e.target.closest("[data-toggle-sidebar]")) {
      document.body.classList.toggle("sidebar-open");
    }
  });

  // An error toast goes once a later turn succeeds (its frame starts with the completed turn):
  // it no longer says how things stand. Toasts that offer an action stay until dismissed.
  const COMPLETED = /^\s*<section class="turn[^>]*data-status="COMPLETED"/;
  document.addEventListener("htmx:wsAfterMessage", function (e) {
    const message = e.detail && e.detail.message;
    if (typeof message !== "string" || !COMPLETED.test(message)) return;
    document.querySelectorAll("#toasts .toast-error:not(.toast-sticky)").forEach(function (t) { t.remove(); });
  });

  // Sub-agents in their parent's bubble: the total of their tokens follows their cards
  // (each card says its own once it ends), and Transcript opens the child's newest node in
  // the history panel (its chat and files there).
  function childTotals() {
    document.querySelectorAll(".child-cards").forEach(function (box) {
      const total = box.nextElementSibling;
      if (!total || !total.classList.contains("child-total")) return;
      const cards = box.querySelectorAll(".sub-card");
      let tokens = 0;
      cards.forEach(function (c) { tokens += Number(c.dataset.tokens) || 0; });
      const text = cards.length ? cards.length + " sub-agent" + (cards.length === 1 ? "" : "s") + (tokens ? " · " + tokens + " tokens" : "") : "";
      if (total.textContent !== text) total.textContent = text;
      total.hidden = !cards.length;
    });
  }
  document.addEventListener("htmx:wsAfterMessage", childTotals);
  document.addEventListener("click", function (e) {
    const open = e.target.closest && e.target.closest("[data-open-child]");
    const app = $("#app");
    if (!open || !app || !window.htmx) return;
    const panel = $("#dag-panel");
    if (panel && panel.classList.contains("collapsed")) {
      const toggle = $("[data-toggle-dag]", panel);
      if (toggle) toggle.click();
    }
    htmx.ajax("GET", "/s/" + app.dataset.sessionId + "/dag/node/tip?branch=" + encodeURIComponent(open.dataset.openChild),
      {target: "#dag-detail", swap: "outerHTML"});
  });

  function watch() {
    const toasts = $("#toasts");
    if (toasts) {
      new MutationObserver(function (records) {
        records.forEach(function (r) {
          r.addedNodes.forEach(function (n) {
            // A toast that offers an action (.toast-sticky) stays until dismissed.
            if (n.nodeType === 1 && n.classList.contains("toast") && !n.classList.contains("toast-sticky")) {
              setTimeout(function () { n.remove(); }, 8000);
            }
          });
        });
      }).observe(toasts, {childList: true});
      // Their height, for the History sheet on a phone to keep room for them (layout.css).
      if (window.ResizeObserver) {
        new ResizeObserver(function () {
          const h = toasts.childElementCount ? toasts.getBoundingClientRect().height + 8 : 0;
          document.documentElement.style.setProperty("--toasts-h", h + "px");
        }).observe(toasts);
      }
    }
    const t = $("#transcript");
    if (t) {
      // Delegated: a redraw replaces the transcript element (and would drop its listener).
      // The reader leaves the end by scrolling up (wheel, touch, keys, the scroll bar); back
      // near the end, it follows again. Only an upward scroll soon after the reader's own
      // input counts: the browser also scrolls up by itself (keeping the view in place as old
      // turns above get their real height once laid out), and that must not stop the following.
      const lastTop = new WeakMap();
      let readerUntil = 0;
      function readerMoved(e) {
        const t = $("#transcript");
        if (!t || (e.target instanceof Node && !t.contains(e.target) && e.type !== "keydown")) return;
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
      new MutationObserver(askScroll)
        .observe(document.querySelector(".main") || t, {childList: true, subtree: true});
      scrollToEnd(true);
    }
  }

  function restoreDraft() {
    const ta = $("#composer-text");
    const key = draftKey();
    if (!ta || !key) return;
    let draft = null;
    try { draft = localStorage.getItem(key); } catch (err) { /* private mode */ }
    if (draft && !ta.value) { ta.value = draft; autosize(ta); }
    // Ready to type on load (not on touch screens, where it would pop the keyboard up).
    if (!location.hash && window.matchMedia && window.matchMedia("(pointer: fine)").matches) {
      ta.focus();
      ta.setSelectionRange(ta.value.length, ta.value.length);
    }
    syncComposer();
  }

  document.addEventListener("DOMContentLoaded", watch);
  document.addEventListener("DOMContentLoaded", restoreDraft);
})();

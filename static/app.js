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
    if (t && (force || t.dataset.follow !== "0")) t.scrollTop = t.scrollHeight;
  }

  // The server's first frame on a socket is a catch-up, in order with the events after it
  // (a fetch of the page would race with them). The first socket names the runs the page
  // shows as running; a reconnect, which may have missed events, asks for a full redraw.
  function catchUpQuery() {
    if (opened > 0) return "&catchup=full";
    const live = Array.from(document.querySelectorAll("#transcript > section.turn[data-status=RUNNING]"))
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
    const running = isRunning();
    if (btn) {
      btn.disabled = running || sending !== null;
      btn.title = running ? "A run is going: Send works when it ends (Esc stops it)" : "Send (Enter)";
    }
    if (hint) hint.textContent = running ? "The agent is working. Keep typing; Send works when it ends, Esc stops it." : "";
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

  function autosize(ta) {
    ta.style.height = "auto";
    ta.style.height = Math.min(ta.scrollHeight, 240) + "px";
  }

  document.addEventListener("keydown", function (e) {
    const ta = e.target;
    if (ta && ta.id === "composer-text" && e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      if (isRunning() || sending !== null) { syncComposer(); return; }
      if (ta.value.trim()) ta.form.requestSubmit();
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
    const close = e.target.closest(".toast-close");
    if (close) { close.closest(".toast").remove(); return; }
    if (e.target.closest("[data-toggle-sidebar]")) {
      document.body.classList.toggle("sidebar-open");
    }
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
    }
    const t = $("#transcript");
    if (t) {
      // Delegated: a redraw replaces the transcript element (and would drop its listener).
      document.addEventListener("scroll", function (e) {
        const el = e.target;
        if (el && el.id === "transcript") el.dataset.follow = nearBottom(el) ? "1" : "0";
      }, true);
      new MutationObserver(function () { scrollToEnd(false); })
        .observe(document.querySelector(".main") || t, {childList: true, subtree: true, characterData: true});
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

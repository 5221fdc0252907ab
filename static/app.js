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

  document.addEventListener("htmx:wsAfterSend", function (e) {
    const form = e.target && e.target.closest ? e.target.closest("#composer") : null;
    if (form) {
      const ta = $("textarea", form);
      ta.value = "";
      autosize(ta);
      scrollToEnd(true);
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
      if (ta.value.trim()) ta.form.requestSubmit();
    }
    if (e.key === "Escape") document.body.classList.remove("sidebar-open");
  });
  document.addEventListener("input", function (e) {
    if (e.target && e.target.id === "composer-text") autosize(e.target);
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

  document.addEventListener("DOMContentLoaded", watch);
})();

// Session menu (rename, archive, delete with a confirmation dialog) and small page helpers.
(function () {
  "use strict";

  document.addEventListener("click", function (e) {
    const t = e.target;
    if (!t || !t.closest) return;
    const opener = t.closest("[data-open-dialog]");
    if (opener) {
      const dialog = document.querySelector(opener.dataset.openDialog);
      const menu = opener.closest("details");
      if (menu) menu.open = false;
      if (dialog && !dialog.open) dialog.showModal();
      return;
    }
    const closer = t.closest("[data-close-dialog]");
    if (closer) { closer.closest("dialog").close(); return; }
    // A click outside an open session menu closes it.
    document.querySelectorAll("details.session-menu[open]").forEach(function (d) {
      if (!d.contains(t)) d.open = false;
    });
  });

  document.addEventListener("keydown", function (e) {
    if (e.key !== "Escape") return;
    document.querySelectorAll("details.session-menu[open]").forEach(function (d) {
      d.open = false;
      const summary = d.querySelector("summary");
      if (summary) summary.focus();
    });
  });

  document.addEventListener("htmx:wsAfterSend", function (e) {
    const form = e.target && e.target.closest ? e.target.closest("form") : null;
    if (!form) return;
    // A sent menu's popover closes (a revert refused later must not leave it open behind
    // its conflict toast).
    const menu = form.closest("details.session-menu, details.revert-menu");
    if (menu) menu.open = false;
  });

  // The tab's title follows the session's name.
  document.addEventListener("htmx:oobAfterSwap", function () {
    const title = document.getElementById("session-title");
    if (title) document.title = title.textContent.trim() + " · Braid";
  });

  document.addEventListener("toggle", function (e) {
    const d = e.target;
    if (d && d.classList && d.classList.contains("session-menu") && d.open) {
      const input = d.querySelector("#rename-input");
      if (input) { input.focus(); input.select(); }
    }
  }, true);
})();

// Keyboard: Esc stops the run (when nothing else is open for Esc to close), the skip link,
// and focus that stays somewhere sensible when the control it was on is redrawn.
(function () {
  "use strict";

  function somethingToClose() {
    return !!document.querySelector(
      "dialog[open], details.session-menu[open], details.revert-menu[open], details.edit-rerun[open], " +
      "details.spawn[open], .diff-panel:not([hidden]):not(:empty), .file-view:not(:empty)") ||
      document.body.classList.contains("sidebar-open");
  }

  // Capture phase: decided before the other Esc handlers close what is open.
  window.addEventListener("keydown", function (e) {
    if (e.key !== "Escape" || e.isComposing || somethingToClose()) return;
    const stop = document.getElementById("stop-btn");
    if (stop) { e.preventDefault(); stop.click(); }
  }, true);

  document.addEventListener("click", function (e) {
    const skip = e.target && e.target.closest && e.target.closest("[data-skip]");
    if (skip) {
      const target = document.querySelector(skip.getAttribute("href"));
      if (target) { e.preventDefault(); target.focus(); }
    }
  });

  // The footer (Revert/Redo) of a turn is redrawn after a revert or redo: focus goes on to
  // its new control (Redo after a revert, Revert after a redo), not to the page or a chip.
  let refocus = null;
  document.addEventListener("htmx:wsAfterSend", function (e) {
    const form = e.target && e.target.closest ? e.target.closest("form") : null;
    const footer = form && form.closest("[id^=footer-]");
    const action = form && form.querySelector("input[name=action]");
    if (!footer || !action) return;
    if (action.value === "revert_turn") refocus = {footer: footer.id, want: ".redo-btn"};
    else if (action.value === "unrevert_turn") refocus = {footer: footer.id, want: ".revert-btn"};
  });
  document.addEventListener("htmx:oobAfterSwap", function (e) {
    const target = e.detail && e.detail.target;
    if (!refocus || !target || target.id !== refocus.footer) return;
    const next = document.querySelector("#" + refocus.footer + " " + refocus.want);
    refocus = null;
    if (next) next.focus();
  });
})();

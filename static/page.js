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
    const menu = form.closest("details.session-menu");
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

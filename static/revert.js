// Reverting turns: closing diff panels and the revert confirmation, the "… anyway" toasts,
// and bringing a freshly opened diff into view. The actions themselves are ws-send forms.
(function () {
  "use strict";

  function closeDiff(panel) {
    panel.hidden = true;
    panel.innerHTML = "";
    const chip = document.querySelector(".chip[aria-pressed=true]");
    if (chip) { chip.setAttribute("aria-pressed", "false"); chip.focus(); }
  }

  document.addEventListener("click", function (e) {
    const t = e.target;
    if (!t || !t.closest) return;
    const close = t.closest("[data-close-diff]");
    if (close) { closeDiff(close.closest(".diff-panel")); return; }
    const cancel = t.closest("[data-close-details]");
    if (cancel) { cancel.closest("details").open = false; return; }
    const chip = t.closest(".chip");
    if (chip && chip.tagName === "BUTTON") {
      document.querySelectorAll(".chip[aria-pressed=true]").forEach(function (c) {
        c.setAttribute("aria-pressed", "false");
      });
      chip.setAttribute("aria-pressed", "true");
    }
    const force = t.closest(".force-btn");
    if (force) {
      // The button submits its form (in the turn's footer); the toast has done its job.
      setTimeout(function () { const toast = force.closest(".toast"); if (toast) toast.remove(); }, 0);
    }
  });

  document.addEventListener("keydown", function (e) {
    if (e.key !== "Escape") return;
    document.querySelectorAll(".diff-panel:not([hidden])").forEach(closeDiff);
    document.querySelectorAll("details.revert-menu[open], details.rewind-menu[open]")
      .forEach(function (d) { d.open = false; });
  });

  function showFresh() {
    const panel = document.querySelector(".diff-panel[data-fresh]");
    if (!panel) return;
    panel.removeAttribute("data-fresh");
    panel.scrollIntoView({block: "nearest"});
    panel.focus({preventScroll: true});
  }
  document.addEventListener("htmx:oobAfterSwap", showFresh);
  document.addEventListener("htmx:wsAfterMessage", showFresh);
})();

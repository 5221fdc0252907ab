// Reverting turns: closing diff panels, the "… anyway" toasts, and bringing a freshly opened
// diff into view. The actions themselves are ws-send forms.
import {$, $$, feature, keymap, on, socket} from "./core.js";

function closeDiff(panel) {
  panel.hidden = true;
  panel.innerHTML = "";
  const chip = $(".chip[aria-pressed=true]");
  if (chip) { chip.setAttribute("aria-pressed", "false"); chip.focus(); }
}

function showFresh() {
  const panel = $(".diff-panel[data-fresh]");
  if (!panel) return;
  panel.removeAttribute("data-fresh");
  panel.scrollIntoView({block: "nearest"});
  panel.focus({preventScroll: true});
}

feature("revert", function () {
  on("click", "[data-close-diff]", function (e, close) { closeDiff(close.closest(".diff-panel")); });
  on("click", "button.chip", function (e, chip) {
    $$(".chip[aria-pressed=true]").forEach(function (c) { c.setAttribute("aria-pressed", "false"); });
    chip.setAttribute("aria-pressed", "true");
  });
  on("click", ".force-btn", function (e, force) {
    // The button submits its form (in the turn's footer); the toast has done its job.
    setTimeout(function () { const t = force.closest(".toast"); if (t) t.remove(); }, 0);
  });
  keymap.bind("Escape", {name: "close-diff", order: 50,
    when: function () { return !!$(".diff-panel:not([hidden])"); },
    run: function () { $$(".diff-panel:not([hidden])").forEach(closeDiff); }});
  document.addEventListener("htmx:oobAfterSwap", showFresh);
  socket.afterHtml(showFresh);
});

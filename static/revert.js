// Reverting turns: a chip's diff and its own Revert / Redo, the turn's Revert menu (its
// confirmation drawn once a page, _turn_pops.html), closing diff panels, the "… anyway"
// toasts, and bringing a freshly opened diff into view. The actions go over the socket: a
// chip or a toast's button through #act-form (core.js sendAction), the menu by its form.
import {$, $$, feature, fillOnce, keymap, on, sendAction, socket} from "./core.js";

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

export function fillRevert(menu) {
  fillOnce(menu, "revert-pop-template", ".revert-pop", function (pop) {
    const n = parseInt(menu.dataset.count, 10) || 0;
    pop.querySelector(".revert-ask").textContent = "Undo this turn's changes to " + n +
      ("more" in menu.dataset ? " more" : "") + " file" + (n === 1 ? "" : "s") +
      "? Later work is kept; you can Redo.";
    pop.querySelector("input[name=turn_id]").value = turnOf(menu);
  });
}

// The turn a chip or a menu is in (its section's run).
function turnOf(el) {
  const turn = el.closest("section.turn");
  return turn ? turn.dataset.runId : "";
}

feature("revert", function () {
  on("click", "[data-close-diff]", function (e, close) { closeDiff(close.closest(".diff-panel")); });
  on("click", ".file-chips button.chip", function (e, chip) {
    $$(".chip[aria-pressed=true]").forEach(function (c) { c.setAttribute("aria-pressed", "false"); });
    chip.setAttribute("aria-pressed", "true");
    const values = {action: "turn_diff", turn_id: turnOf(chip)};
    if (chip.dataset.path !== undefined) values.path = chip.dataset.path;
    sendAction(values, chip);
  });
  on("click", ".file-chips button.chip-act", function (e, act) {
    sendAction({action: act.dataset.act, turn_id: turnOf(act), paths: [act.dataset.path]}, act);
  });
  on("click", "details.revert-menu > summary", function (e, summary) {
    fillRevert(summary.parentElement);
  });
  on("click", ".force-btn", function (e, force) {
    // The toast's action, for its turn (focus goes on in that turn's footer); the toast has
    // done its job.
    const values = JSON.parse(force.dataset.force);
    sendAction(values, document.getElementById("footer-" + values.turn_id));
    setTimeout(function () { const t = force.closest(".toast"); if (t) t.remove(); }, 0);
  });
  keymap.bind("Escape", {name: "close-diff", order: 50,
    when: function () { return !!$(".diff-panel:not([hidden])"); },
    run: function () { $$(".diff-panel:not([hidden])").forEach(closeDiff); }});
  document.addEventListener("htmx:oobAfterSwap", showFresh);
  socket.afterHtml(showFresh);
});

// Going back to a user message, and going on from a turn: a message's Rewind menu and its
// Edit & rerun, a turn's Resume and Regenerate. The menus' contents are drawn once a page
// (<template id="rewind-pop-template">, _rewind_pop.html; "edit-pop-template", _turn_pops.html)
// and copied into the menu when it is first opened, with that message's run and index (issue
// 30: the page's markup per turn).
import {fillOnce, feature, on, sendAction} from "./core.js";

const VALS = {
  both: function (i) { return {continue_from: i + 1}; },
  talk: function (i) { return {continue_from: i + 1, keep_files: true}; },
  files: function (i) { return {message_index: i}; },
};

function index(menu) { return parseInt(menu.dataset.index, 10) || 0; }

// The run of the turn a message's menu is in.
function runOf(menu) {
  const turn = menu.closest("section.turn");
  return turn ? turn.dataset.runId : "";
}

export function fillRewind(menu) {
  fillOnce(menu, "rewind-pop-template", ".rewind-pop", function (pop) {
    pop.querySelectorAll("form[data-rewind]").forEach(function (form) {
      form.querySelector("input[name=run_id]").value = runOf(menu);
      form.setAttribute("hx-vals", JSON.stringify(VALS[form.dataset.rewind](index(menu))));
    });
  });
}

// The editor holds the message as its bubble shows it (#ubody-<message id>: its text, whole).
export function fillEdit(menu) {
  const messageId = menu.id.slice("edit-".length);
  fillOnce(menu, "edit-pop-template", ".edit-form", function (form) {
    form.querySelector("input[name=run_id]").value = runOf(menu);
    form.setAttribute("hx-vals", JSON.stringify({continue_from: index(menu)}));
    const text = form.querySelector("textarea");
    text.id = "edit-text-" + messageId;
    form.querySelector("label").htmlFor = text.id;
    const bubble = document.getElementById("ubody-" + messageId);
    text.value = bubble ? bubble.textContent : "";
  });
}

feature("rewind", function () {
  // On the click that opens it (a mouse, or Enter / Space on its summary), before it opens.
  on("click", "details.rewind-menu > summary", function (e, summary) {
    fillRewind(summary.parentElement);
  });
  on("click", "details.edit-rerun > summary", function (e, summary) {
    fillEdit(summary.parentElement);
  });
  // Resume / Regenerate: continue_run for the turn's run, with the button's own values.
  on("click", "button[data-continue]", function (e, button) {
    sendAction({action: "continue_run", run_id: runOf(button),
      ...JSON.parse(button.dataset.continue)}, button);
  });
});

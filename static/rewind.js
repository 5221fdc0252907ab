// A user message's Rewind menu: its three choices are drawn once a page
// (<template id="rewind-pop-template">, _rewind_pop.html) and copied into the menu when it is
// first opened, with that message's run and index (issue 30: the page's markup per turn).
import {feature, on} from "./core.js";

const VALS = {
  both: function (i) { return {continue_from: i + 1}; },
  talk: function (i) { return {continue_from: i + 1, keep_files: true}; },
  files: function (i) { return {message_index: i}; },
};

export function fillRewind(menu) {
  if (menu.querySelector(".rewind-pop")) return;
  const template = document.getElementById("rewind-pop-template");
  if (!template) return;
  const pop = template.content.firstElementChild.cloneNode(true);
  const index = parseInt(menu.dataset.index, 10) || 0;
  pop.querySelectorAll("form[data-rewind]").forEach(function (form) {
    form.querySelector("input[name=run_id]").value = menu.dataset.runId;
    form.setAttribute("hx-vals", JSON.stringify(VALS[form.dataset.rewind](index)));
  });
  menu.appendChild(pop);
  htmx.process(pop);
}

feature("rewind", function () {
  // On the click that opens it (a mouse, or Enter / Space on its summary), before it opens.
  on("click", "details.rewind-menu > summary", function (e, summary) {
    fillRewind(summary.parentElement);
  });
});

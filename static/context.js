// What the model is sent (issue 33): the header's instructions chip opens the branch's
// AGENTS.md in the file panel (files.js opens the panel; the file is loaded into its view),
// and a compaction's divider fetches its summary when first opened (it is drawn folded and
// empty: a summary is up to a quarter of the context window, issue 30).
import {$, feature, on, sessionId} from "./core.js";

export function loadSummary(divider) {
  const box = $(".compaction-summary[data-note-id]", divider);
  if (!box || box.dataset.loading || !window.htmx) return;
  box.dataset.loading = "1";
  htmx.ajax("GET", "/s/" + sessionId() + "/notes/" + encodeURIComponent(box.dataset.noteId),
    {target: box, swap: "innerHTML"}).then(function () {
    box.removeAttribute("data-note-id");
    box.removeAttribute("aria-busy");
  }, function () { delete box.dataset.loading; });
}

feature("context", function () {
  on("click", "[data-open-instructions]", function (e, chip) {
    if (chip.disabled || !window.htmx) return;
    const opener = $("#open-files");
    if (opener) opener.click();
    const q = new URLSearchParams({ref: "", path: "AGENTS.md"});
    htmx.ajax("GET", "/s/" + sessionId() + "/files/view?" + q.toString(), {target: "#file-view", swap: "outerHTML"});
  });
  // On the click that opens it (a mouse, or Enter / Space on its summary).
  on("click", "details.compaction-divider > summary", function (e, summary) {
    loadSummary(summary.parentElement);
  });
});

// What the model is sent (issue 33): the header's instructions chip opens the branch's
// AGENTS.md in the file panel (files.js opens the panel; the file is loaded into its view).
import {$, feature, on, sessionId} from "./core.js";

feature("context", function () {
  on("click", "[data-open-instructions]", function (e, chip) {
    if (chip.disabled || !window.htmx) return;
    const opener = $("#open-files");
    if (opener) opener.click();
    const q = new URLSearchParams({ref: "", path: "AGENTS.md"});
    htmx.ajax("GET", "/s/" + sessionId() + "/files/view?" + q.toString(), {target: "#file-view", swap: "outerHTML"});
  });
});

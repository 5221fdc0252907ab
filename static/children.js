// Sub-agents in their parent's bubble: the total of their tokens follows their cards (each
// card says its own once it ends), and Transcript opens the child's newest node in the
// history panel (its chat and files there).
import {$, $$, feature, on, sessionId, socket} from "./core.js";

function childTotals() {
  $$(".child-cards").forEach(function (box) {
    let total = box.nextElementSibling;
    const cards = $$(".sub-card", box);
    if (!total || !total.classList.contains("child-total")) {
      // A turn drawn with no sub-agent has no total's line: it comes with the first card (a
      // sub-agent's own card lists its children without one).
      if (!cards.length || box.closest(".sub-card") || !box.id.startsWith("children-")) return;
      total = document.createElement("p");
      total.className = "child-total muted";
      total.id = "child-total-" + box.id.slice("children-".length);
      box.after(total);
    }
    let tokens = 0;
    cards.forEach(function (c) { tokens += Number(c.dataset.tokens) || 0; });
    const text = cards.length ? cards.length + " sub-agent" + (cards.length === 1 ? "" : "s") + (tokens ? " · " + tokens + " tokens" : "") : "";
    if (total.textContent !== text) total.textContent = text;
    total.hidden = !cards.length;
  });
}

feature("children", function () {
  socket.afterHtml(childTotals);
  on("click", "[data-open-child]", function (e, open) {
    if (!window.htmx || !$("#app")) return;
    const panel = $("#dag-panel");
    if (panel && panel.classList.contains("collapsed")) {
      const toggle = $("[data-toggle-dag]", panel);
      if (toggle) toggle.click();
    }
    htmx.ajax("GET", "/s/" + sessionId() + "/dag/node/tip?branch=" + encodeURIComponent(open.dataset.openChild),
      {target: "#dag-detail", swap: "outerHTML"});
  });
});

// "Show more" on long messages, and timestamps: relative, kept fresh, exact on hover.
import {feature, socket} from "./core.js";

function onShowMore(e) {
  const btn = e.target && e.target.closest && e.target.closest(".show-more");
  if (!btn) return;
  const box = btn.getAttribute("aria-controls") ? document.getElementById(btn.getAttribute("aria-controls"))
    : btn.previousElementSibling;
  if (!box) return;
  const open = box.classList.toggle("expanded");
  btn.setAttribute("aria-expanded", open ? "true" : "false");
  btn.textContent = open ? "Show less" : "Show more";
}


function ago(then) {
  const s = (Date.now() - then.getTime()) / 1000;
  if (s < 45) return "just now";
  const steps = [[31536000, "y"], [2592000, "mo"], [86400, "d"], [3600, "h"], [60, "min"]];
  for (let i = 0; i < steps.length; i++) {
    if (s >= steps[i][0]) return Math.floor(s / steps[i][0]) + " " + steps[i][1] + " ago";
  }
  return "just now";
}

function refresh() {
  document.querySelectorAll("time.ts[datetime]").forEach(function (t) {
    const then = new Date(t.getAttribute("datetime"));
    if (isNaN(then)) return;
    t.textContent = ago(then);
    if (!t.dataset.local) {
      t.title = then.toLocaleString(undefined, {dateStyle: "full", timeStyle: "medium"});
      t.dataset.local = "1";
    }
  });
}
feature("times", function () {
  document.addEventListener("click", onShowMore);
  refresh();
  socket.afterHtml(refresh);
  setInterval(refresh, 30000);
});

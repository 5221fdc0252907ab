// Copy buttons: on code blocks (added to each <pre> of an answer) and on messages.
import {feature, socket} from "./core.js";

function textOf(el) {
  const cells = el.querySelectorAll(".lc");
  if (cells.length) return Array.from(cells).map(function (c) { return c.textContent; }).join("\n");
  const code = el.querySelector("code");
  return (code || el).innerText.replace(/\n$/, "");
}

async function copy(text, btn) {
  try {
    await navigator.clipboard.writeText(text);
  } catch (err) {
    const area = document.createElement("textarea");
    area.value = text; document.body.append(area); area.select();
    document.execCommand("copy"); area.remove();
  }
  const was = btn.textContent;
  btn.textContent = "Copied";
  btn.classList.add("copied");
  setTimeout(function () { btn.textContent = was; btn.classList.remove("copied"); }, 1500);
}

function addButtons(root) {
  (root || document).querySelectorAll(".md pre:not([data-copy-ready])").forEach(function (pre) {
    pre.setAttribute("data-copy-ready", "");
    const btn = document.createElement("button");
    btn.type = "button";
    btn.className = "copy-btn copy-code";
    btn.textContent = "Copy";
    btn.setAttribute("aria-label", "Copy the code");
    pre.append(btn);
  });
}

function onCopyClick(e) {
  const btn = e.target && e.target.closest && e.target.closest(".copy-btn");
  if (!btn) return;
  if (btn.classList.contains("copy-code")) {
    const pre = btn.closest("pre").cloneNode(true);
    pre.querySelectorAll(".copy-btn").forEach(function (b) { b.remove(); });
    copy(textOf(pre), btn);
  } else if (btn.dataset.copyTarget) {
    const target = document.querySelector(btn.dataset.copyTarget);
    if (target) copy(textOf(target), btn);
  } else if (btn.dataset.copyMessage) {
    const msg = document.getElementById(btn.dataset.copyMessage);
    if (msg) {
      const clone = msg.cloneNode(true);
      clone.querySelectorAll(".copy-btn, .tool-card, .show-more").forEach(function (b) { b.remove(); });
      copy(clone.innerText.trim(), btn);
    }
  }
}


feature("copy", function () {
  document.addEventListener("click", onCopyClick);
  addButtons(document);
  document.addEventListener("htmx:afterSettle", function () { addButtons(document); });
  socket.afterHtml(function () { addButtons(document); });
});

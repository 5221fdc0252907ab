// Session menu (rename, archive, delete with a confirmation dialog) and small page helpers.
(function () {
  "use strict";

  document.addEventListener("click", function (e) {
    const t = e.target;
    if (!t || !t.closest) return;
    const opener = t.closest("[data-open-dialog]");
    if (opener) {
      const dialog = document.querySelector(opener.dataset.openDialog);
      const menu = opener.closest("details");
      if (menu) menu.open = false;
      if (dialog && !dialog.open) dialog.showModal();
      return;
    }
    const closer = t.closest("[data-close-dialog]");
    if (closer) { closer.closest("dialog").close(); return; }
    // A click outside an open session menu closes it.
    document.querySelectorAll("details.session-menu[open]").forEach(function (d) {
      if (!d.contains(t)) d.open = false;
    });
  });

  document.addEventListener("keydown", function (e) {
    if (e.key !== "Escape") return;
    document.querySelectorAll("details.session-menu[open]").forEach(function (d) {
      d.open = false;
      const summary = d.querySelector("summary");
      if (summary) summary.focus();
    });
  });

  document.addEventListener("htmx:wsAfterSend", function (e) {
    const form = e.target && e.target.closest ? e.target.closest("form") : null;
    if (!form) return;
    // A sent menu's popover closes (a revert refused later must not leave it open behind
    // its conflict toast).
    const menu = form.closest("details.session-menu, details.revert-menu");
    if (menu) menu.open = false;
  });

  // The tab's title follows the session's name.
  document.addEventListener("htmx:oobAfterSwap", function () {
    const title = document.getElementById("session-title");
    if (title) document.title = title.textContent.trim() + " · Braid";
  });

  document.addEventListener("toggle", function (e) {
    const d = e.target;
    if (d && d.classList && d.classList.contains("session-menu") && d.open) {
      const input = d.querySelector("#rename-input");
      if (input) { input.focus(); input.select(); }
    }
  }, true);
})();

// Keyboard: Esc stops the run (when nothing else is open for Esc to close), the skip link,
// and focus that stays somewhere sensible when the control it was on is redrawn.
(function () {
  "use strict";

  function somethingToClose() {
    return !!document.querySelector(
      "dialog[open], details.session-menu[open], details.revert-menu[open], details.edit-rerun[open], " +
      "details.spawn[open], .diff-panel:not([hidden]):not(:empty), .file-view:not(:empty), " +
      "#queue .queued-edit:not([hidden])") ||
      document.body.classList.contains("sidebar-open");
  }

  // Capture phase: decided before the other Esc handlers close what is open.
  window.addEventListener("keydown", function (e) {
    if (e.key !== "Escape" || e.isComposing || somethingToClose()) return;
    const stop = document.getElementById("stop-btn");
    if (stop) { e.preventDefault(); stop.click(); }
  }, true);

  document.addEventListener("click", function (e) {
    const skip = e.target && e.target.closest && e.target.closest("[data-skip]");
    if (skip) {
      const target = document.querySelector(skip.getAttribute("href"));
      if (target) { e.preventDefault(); target.focus(); }
    }
  });

  // The footer (Revert/Redo) of a turn is redrawn after a revert or redo: focus goes on to
  // its new control (Redo after a revert, Revert after a redo), not to the page or a chip.
  let refocus = null;
  document.addEventListener("htmx:wsAfterSend", function (e) {
    const form = e.target && e.target.closest ? e.target.closest("form") : null;
    const footer = form && form.closest("[id^=footer-]");
    const action = form && form.querySelector("input[name=action]");
    if (!footer || !action) return;
    if (action.value === "revert_turn") refocus = {footer: footer.id, want: ".redo-btn"};
    else if (action.value === "unrevert_turn") refocus = {footer: footer.id, want: ".revert-btn"};
  });
  document.addEventListener("htmx:oobAfterSwap", function (e) {
    const target = e.detail && e.detail.target;
    if (!refocus || !target || target.id !== refocus.footer) return;
    const next = document.querySelector("#" + refocus.footer + " " + refocus.want);
    refocus = null;
    if (next) next.focus();
  });
})();

// The file panel: a dialog with the workdir's tree at the shown branch or a DAG node, a whole
// file highlighted by the server, downloads, and uploads (a button, or files dropped on it or
// anywhere on the page).
(function () {
  "use strict";

  function sessionId() { const app = document.getElementById("app"); return app ? app.dataset.sessionId : ""; }

  function openFiles(ref, label, path) {
    const dialog = document.getElementById("files-dialog");
    if (!dialog || !window.htmx) return;
    const q = new URLSearchParams({ref: ref || "", path: path || "", label: label || ""});
    document.getElementById("file-view").innerHTML = "";
    if (!dialog.open) dialog.showModal();
    return htmx.ajax("GET", "/s/" + sessionId() + "/files?" + q.toString(), {target: "#files-panel", swap: "outerHTML"});
  }

  function refreshFiles() {
    const dialog = document.getElementById("files-dialog");
    const panel = document.getElementById("files-panel");
    if (!dialog || !dialog.open || !panel || panel.dataset.ref === undefined) return;
    // Only a branch view changes when files come in; a commit's files never do.
    if (/^[0-9a-f]{40}$/.test(panel.dataset.ref || "")) return;
    openFiles(panel.dataset.ref, "", panel.dataset.path);
  }

  async function upload(fileList, dir) {
    const files = Array.from(fileList || []);
    if (!files.length) return;
    const body = new FormData();
    files.forEach(function (f) { body.append("files", f, f.webkitRelativePath || f.name); });
    body.append("dir", dir || "");
    const zone = document.querySelector(".drop-zone");
    if (zone) zone.classList.add("busy");
    let message = "";
    try {
      const res = await fetch("/api/sessions/" + sessionId() + "/files", {method: "POST", body: body, credentials: "same-origin"});
      if (!res.ok) {
        const err = await res.json().catch(function () { return {}; });
        message = (err.error && err.error.message) || ("upload failed (" + res.status + ")");
      }
    } catch (err) {
      message = "upload failed: " + err;
    }
    if (zone) zone.classList.remove("busy");
    if (message && !sayInDialog(message)) toast(message);
    if (!message) refreshFiles();
  }

  // The Files dialog is modal (the top layer): a toast of the page would sit under it, cut
  // off, so a refused upload says why inside the dialog, under its drop zone.
  function sayInDialog(text) {
    const dialog = document.getElementById("files-dialog");
    const form = document.getElementById("files-upload");
    if (!dialog || !dialog.open || !form || !dialog.contains(form)) return false;
    let line = form.querySelector(".upload-error");
    if (!line) {
      line = document.createElement("p");
      line.className = "upload-error";
      line.setAttribute("role", "alert");
      form.append(line);
    }
    line.textContent = text;
    return true;
  }

  function toast(text) {
    const box = document.getElementById("toasts");
    if (!box) return;
    const t = document.createElement("div");
    t.className = "toast toast-error";
    t.setAttribute("role", "alert");
    const span = document.createElement("span");
    span.textContent = text;
    const close = document.createElement("button");
    close.type = "button"; close.className = "toast-close"; close.setAttribute("aria-label", "Dismiss"); close.textContent = "×";
    t.append(span, close);
    box.append(t);
  }

  document.addEventListener("click", function (e) {
    const t = e.target;
    if (!t || !t.closest) return;
    const opener = t.closest("[data-open-files]");
    if (opener) { openFiles(opener.dataset.ref || "", opener.dataset.label || ""); return; }
    if (t.closest("[data-close-file]")) { document.getElementById("file-view").innerHTML = ""; }
  });

  document.addEventListener("change", function (e) {
    if (e.target && e.target.id === "files-input") {
      const form = e.target.closest("form");
      upload(e.target.files, form ? form.dataset.dir : "");
      e.target.value = "";
    }
  });

  // Drag and drop: on the panel's drop zone (into its folder) or on the page (into workdir/).
  let depth = 0;
  function hasFiles(e) { return e.dataTransfer && Array.from(e.dataTransfer.types || []).indexOf("Files") !== -1; }
  document.addEventListener("dragenter", function (e) {
    if (!hasFiles(e)) return;
    depth += 1;
    document.body.classList.add("dragging-files");
  });
  document.addEventListener("dragleave", function (e) {
    if (!hasFiles(e)) return;
    depth = Math.max(0, depth - 1);
    if (!depth) document.body.classList.remove("dragging-files");
  });
  document.addEventListener("dragover", function (e) { if (hasFiles(e)) e.preventDefault(); });
  document.addEventListener("drop", function (e) {
    if (!hasFiles(e)) return;
    e.preventDefault();
    depth = 0;
    document.body.classList.remove("dragging-files");
    const form = e.target.closest && e.target.closest("#files-upload");
    upload(e.dataTransfer.files, form ? form.dataset.dir : "");
  });

  // A file opened in the panel comes into view with focus, for the keyboard.
  document.addEventListener("htmx:afterSwap", function (e) {
    const target = e.detail && e.detail.target;
    if (target && target.id === "file-view") {
      const view = document.getElementById("file-view");
      if (view && view.firstElementChild) { view.scrollIntoView({block: "nearest"}); view.focus({preventScroll: true}); }
    }
  });

  document.addEventListener("keydown", function (e) {
    // Esc in the dialog closes an open file first, then the dialog (the browser's own).
    const view = document.getElementById("file-view");
    if (e.key === "Escape" && view && view.firstElementChild && document.getElementById("files-dialog").open) {
      e.preventDefault();
      view.innerHTML = "";
    }
  });

  window.braidFiles = {open: openFiles, upload: upload};
})();

// Copy buttons: on code blocks (added to each <pre> of an answer) and on messages.
(function () {
  "use strict";

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

  document.addEventListener("click", function (e) {
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
  });

  document.addEventListener("DOMContentLoaded", function () { addButtons(document); });
  document.addEventListener("htmx:afterSettle", function () { addButtons(document); });
  document.addEventListener("htmx:wsAfterMessage", function () { addButtons(document); });
})();

// "Show more" on long messages, and timestamps: relative, kept fresh, exact on hover.
(function () {
  "use strict";

  document.addEventListener("click", function (e) {
    const btn = e.target && e.target.closest && e.target.closest(".show-more");
    if (!btn) return;
    const box = btn.getAttribute("aria-controls") ? document.getElementById(btn.getAttribute("aria-controls"))
      : btn.previousElementSibling;
    if (!box) return;
    const open = box.classList.toggle("expanded");
    btn.setAttribute("aria-expanded", open ? "true" : "false");
    btn.textContent = open ? "Show less" : "Show more";
  });

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
  document.addEventListener("DOMContentLoaded", refresh);
  document.addEventListener("htmx:wsAfterMessage", refresh);
  setInterval(refresh, 30000);
})();

// Socket frames may update a turn the page does not show (paged out, or redrawn away): such
// an update has nothing to change, so it is dropped here instead of making htmx report
// htmx:oobErrorNoTarget. Only per-turn targets are dropped; any other missing target is
// still an error.
(function () {
  "use strict";
  const PER_TURN = /^#(turn|footer|live|parts|tool-status|tool-output|tool|diff|chips|revert|nav|meta|answer|msg|approval|children|sub-card)-/;

  function targetOf(el) {
    const spec = el.getAttribute("hx-swap-oob") || "true";
    const m = spec.match(/^[A-Za-z]+:(#[\w-]+)$/);
    if (m) return m[1];
    return el.id ? "#" + el.id : null;
  }

  htmx.defineExtension("braid-oob", {
    transformResponse: function (text, xhr) {
      if (xhr) return text;  // only socket frames (htmx calls this with no xhr for them)
      const tpl = document.createElement("template");
      tpl.innerHTML = text;
      let dropped = false;
      Array.from(tpl.content.children).forEach(function (child) {
        const sel = targetOf(child);
        if (sel && PER_TURN.test(sel) && !document.getElementById(sel.slice(1))) {
          child.remove();
          dropped = true;
        }
      });
      return dropped ? tpl.innerHTML : text;
    }
  });
})();

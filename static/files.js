// The file panel: a dialog with the workdir's tree at the shown branch or a DAG node, a whole
// file highlighted by the server, downloads, and uploads (a button, or files dropped on it or
// anywhere on the page), sent by htmx through the page's #upload-form (session.html).
import {$, feature, keymap, on, sessionId, toast} from "./core.js";

function openFiles(ref, label, path) {
  const dialog = $("#files-dialog");
  if (!dialog || !window.htmx) return;
  const q = new URLSearchParams({ref: ref || "", path: path || "", label: label || ""});
  $("#file-view").innerHTML = "";
  if (!dialog.open) dialog.showModal();
  return htmx.ajax("GET", "/s/" + sessionId() + "/files?" + q.toString(), {target: "#files-panel", swap: "outerHTML"});
}

function refreshFiles() {
  const dialog = $("#files-dialog");
  const panel = $("#files-panel");
  if (!dialog || !dialog.open || !panel || panel.dataset.ref === undefined) return;
  // Only a branch view changes when files come in; a commit's files never do.
  if (/^[0-9a-f]{40}$/.test(panel.dataset.ref || "")) return;
  openFiles(panel.dataset.ref, "", panel.dataset.path);
}

function upload(fileList, dir) {
  const files = Array.from(fileList || []);
  const form = $("#upload-form");
  if (!files.length || !form || !window.htmx) return;
  const zone = $(".drop-zone");
  if (zone) zone.classList.add("busy");
  htmx.ajax("POST", form.getAttribute("hx-post"), {source: form, swap: "none", values: {files: files, dir: dir || ""}});
}

// The Files dialog is modal (the top layer): a toast of the page would sit under it, cut off,
// so a refused upload says why inside the dialog, under its drop zone.
function sayInDialog(text) {
  const dialog = $("#files-dialog");
  const form = $("#files-upload");
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

// Its answer: the listing refreshed, or why it was refused (said where the user looks, not
// reported as htmx's error).
function uploaded(e) {
  const d = e.detail;
  if (!d.requestConfig || !d.requestConfig.elt || d.requestConfig.elt.id !== "upload-form") return;
  const zone = $(".drop-zone");
  if (zone) zone.classList.remove("busy");
  d.shouldSwap = false;
  if (d.xhr.status < 400) { refreshFiles(); return; }
  d.isError = false;
  let message = "upload failed (" + d.xhr.status + ")";
  try { message = JSON.parse(d.xhr.responseText).error.message || message; } catch (err) { /* not JSON */ }
  if (!sayInDialog(message)) toast(message);
}

let depth = 0;
function hasFiles(e) { return e.dataTransfer && Array.from(e.dataTransfer.types || []).indexOf("Files") !== -1; }

feature("files", function () {
  on("click", "[data-open-files]", function (e, opener) { openFiles(opener.dataset.ref || "", opener.dataset.label || ""); });
  on("click", "[data-close-file]", function () { $("#file-view").innerHTML = ""; });
  on("change", "#files-input", function (e, input) {
    const form = input.closest("form");
    upload(input.files, form ? form.dataset.dir : "");
    input.value = "";
  });
  document.addEventListener("htmx:beforeSwap", uploaded);

  // Drag and drop: on the panel's drop zone (into its folder) or on the page (into workdir/).
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
      const view = $("#file-view");
      if (view && view.firstElementChild) { view.scrollIntoView({block: "nearest"}); view.focus({preventScroll: true}); }
    }
  });

  // Esc in the dialog closes an open file first, then the dialog (the browser's own).
  keymap.bind("Escape", {name: "close-file", order: 20,
    when: function () { const v = $("#file-view"); return !!v && !!v.firstElementChild && $("#files-dialog").open; },
    run: function () { $("#file-view").innerHTML = ""; }});
});

// The composer: the text stays until the server accepts it (a refused send loses nothing),
// Send queues while a run goes, the draft of each session survives a reload; the queue below
// the transcript (_queue.html) with its inline Edit; the demo's examples; the phone sidebar.
import {$, $$, feature, keymap, on, toast} from "./core.js";
import {scrollToEnd} from "./stream.js";

let sending = null;

function draftKey() { const app = $("#app"); return app ? "braid.draft." + app.dataset.sessionId : null; }
function saveDraft(text) {
  const key = draftKey();
  if (!key) return;
  try { if (text) localStorage.setItem(key, text); else localStorage.removeItem(key); } catch (err) { /* private mode */ }
}
function isRunning() { const rs = $("#run-state"); return !!rs && rs.dataset.running === "1"; }

function syncComposer() {
  const btn = $("#send-btn");
  const hint = $("#composer-hint");
  const queue = $("#composer-queue");
  const running = isRunning();
  // While a run goes, Send queues the message (send_message {queue: true}): it runs when the
  // agent is free, and waits below the transcript meanwhile (Edit, Remove).
  if (queue) queue.value = running ? "true" : "false";
  if (btn) {
    btn.disabled = sending !== null;
    btn.title = running ? "A run is going: Send queues the message (Esc stops the run)" : "Send (Enter)";
  }
  if (hint) hint.textContent = running ? "The agent is working. Send queues your message; Esc stops it." : "";
}

function autosize(ta) {
  ta.style.height = "auto";
  ta.style.height = Math.min(ta.scrollHeight, 240) + "px";
}

// The queue's inline edit: what is typed there survives the queue's redraws (queue_changed
// from this or another tab) until it is saved (update_queued) or the edit is cancelled.
let editing = null;  // {id, text, orig} of the message being edited
function editQueued(id, text) {
  $$("#queue .queued").forEach(function (li) {
    const open = li.dataset.queuedId === id;
    const form = $(".queued-edit", li);
    $(".queued-view", li).hidden = open;
    form.hidden = !open;
    if (open) {
      const ta = $("textarea", form);
      if (text !== undefined) ta.value = text;
      ta.focus();
      const shown = $(".queued-text", li);
      editing = {id: id, text: ta.value, orig: shown ? shown.textContent : ""};
    }
  });
  if (id === null || !document.getElementById("queued-" + id)) editing = null;
}

function queueRedrawn() {
  if (!editing) return;
  if (document.getElementById("queued-" + editing.id)) { editQueued(editing.id, editing.text); return; }
  // The message started (or another tab removed it) while it was being edited: what was
  // typed is not thrown away but put in the message box, to send as a new message.
  const typed = editing.text.trim();
  const changed = typed !== editing.orig.trim();
  editing = null;
  if (!changed) return;  // nothing typed: the message ran as it was
  const ta = $("#composer-text");
  if (!typed || !ta) return;
  ta.value = ta.value.trim() ? ta.value.replace(/\s*$/, "\n\n") + typed : typed;
  ta.dispatchEvent(new Event("input", {bubbles: true}));  // kept as the draft
  ta.focus();
  toast("That message started before your edit was saved: your edit is in the message box.",
    {level: "info", className: "queued-rescued"});
}

function restoreDraft() {
  const ta = $("#composer-text");
  const key = draftKey();
  if (!ta || !key) return;
  let draft = null;
  try { draft = localStorage.getItem(key); } catch (err) { /* private mode */ }
  if (draft && !ta.value) { ta.value = draft; autosize(ta); }
  // Ready to type on load (not on touch screens, where it would pop the keyboard up).
  if (!location.hash && window.matchMedia && window.matchMedia("(pointer: fine)").matches) {
    ta.focus();
    ta.setSelectionRange(ta.value.length, ta.value.length);
  }
  syncComposer();
}

function inQueuedEdit(e) { return e.target instanceof Element && !!e.target.closest(".queued-edit"); }
function plainEnter(e) { return !e.shiftKey; }

feature("composer", function () {
  keymap.bind("Enter", {name: "send", order: 10,
    when: function (e) { return e.target.id === "composer-text" && plainEnter(e); },
    run: function (e) {
      if (sending !== null) { syncComposer(); return; }
      if (e.target.value.trim()) { syncComposer(); e.target.form.requestSubmit(); }
    }});
  keymap.bind("Enter", {name: "save-queued", order: 10,
    when: function (e) { return inQueuedEdit(e) && plainEnter(e); },
    run: function (e) { if (e.target.value.trim()) e.target.form.requestSubmit(); }});
  keymap.bind("Enter", {name: "continue-from-node", order: 10,
    when: function (e) { return e.target.id === "dag-continue-input" && plainEnter(e); },
    run: function (e) { if (e.target.value.trim()) e.target.form.requestSubmit(); }});
  keymap.bind("Escape", {name: "cancel-queued-edit", order: 10,
    when: function () { return !!$("#queue .queued-edit:not([hidden])"); },
    run: function () { editQueued(null); }});
  keymap.bind("Escape", {name: "close-sidebar", order: 60,
    when: function () { return document.body.classList.contains("sidebar-open"); },
    run: function () { document.body.classList.remove("sidebar-open"); }});

  document.addEventListener("htmx:wsAfterSend", function (e) {
    const form = e.target && e.target.closest ? e.target.closest("#composer") : null;
    if (!form) return;
    sending = $("textarea", form).value;
    syncComposer();
    scrollToEnd(true);
  });
  document.addEventListener("htmx:oobAfterSwap", function (e) {
    const id = e.detail && e.detail.target && e.detail.target.id;
    if (id === "composer-ack") {
      const ack = $("#composer-ack");
      const ta = $("#composer-text");
      if (ack && ta && ack.dataset.state === "accepted" && sending !== null) {
        // Typing that came after the send stays.
        ta.value = ta.value.indexOf(sending) === 0 ? ta.value.slice(sending.length).replace(/^\n+/, "") : ta.value;
        saveDraft(ta.value);
        autosize(ta);
      }
      sending = null;
    }
    if (id === "queue") queueRedrawn();
    syncComposer();
  });
  document.addEventListener("input", function (e) {
    if (editing && inQueuedEdit(e)) editing.text = e.target.value;
    if (e.target.id === "composer-text") { autosize(e.target); saveDraft(e.target.value); }
  });
  document.addEventListener("submit", function (e) {
    if (e.target.classList.contains("queued-edit")) editing = null;
    // Before htmx reads the form: queue only when the page knows a run is going.
    if (e.target.id === "composer") syncComposer();
  }, true);

  // The demo model's help: an example goes into the message box, ready to send.
  on("click", "[data-example]", function (e, example) {
    const ta = $("#composer-text");
    if (!ta) return;
    ta.value = example.dataset.example;
    autosize(ta);
    saveDraft(ta.value);
    ta.focus();
  });
  on("click", "[data-queue-edit]", function (e, btn) { editQueued(btn.closest(".queued").dataset.queuedId); });
  on("click", "[data-queue-cancel]", function () { editQueued(null); });
  on("click", "[data-toggle-sidebar]", function () { document.body.classList.toggle("sidebar-open"); });
  restoreDraft();
});

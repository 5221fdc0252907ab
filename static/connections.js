// The user's own connections (model endpoints, HTTP MCP servers): a dialog the session menu
// opens, its panel drawn by the server (/connections, templates/_connections.html), its forms
// sent to the JSON API (POST /api/connections, DELETE /api/connections/{kind}/{name}). After
// a change the model picker and a loaded Tools list are drawn again: a new endpoint's models
// and a new server's tools are there without a reload. A refusal is said inside the dialog
// (a toast of the page would sit under the modal).
import {$, feature, on, sessionId} from "./core.js";

function loadPanel() {
  if (!window.htmx) return Promise.resolve();
  return htmx.ajax("GET", "/connections", {target: "#connections-panel", swap: "outerHTML"});
}

function refreshPage() {
  if (!window.htmx || !sessionId()) return;
  if ($("#model-picker")) htmx.ajax("GET", "/s/" + sessionId() + "/model", {target: "#model-picker", swap: "outerHTML"});
  const tools = $("#tools-list");
  if (tools && !tools.querySelector(".muted:only-child")) {
    htmx.ajax("GET", "/s/" + sessionId() + "/tools", {target: "#tools-list", swap: "innerHTML"});
  }
}

function say(text) {
  const line = $("#connections-panel .connections-error");
  if (!line) return;
  line.textContent = text || "";
  line.hidden = !text;
}

// "Name: value" lines as an object of headers.
export function parseHeaders(text) {
  const out = {};
  for (const line of (text || "").split("\n")) {
    if (!line.trim()) continue;
    const at = line.indexOf(":");
    if (at < 1) throw new Error("each header is one line: Name: value");
    out[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return out;
}

async function send(method, path, body) {
  const res = await fetch(path, {
    method: method, credentials: "same-origin",
    headers: body ? {"Content-Type": "application/json"} : {},
    body: body ? JSON.stringify(body) : undefined,
  });
  if (res.ok) return null;
  let message = method + " failed (" + res.status + ")";
  try {
    const data = await res.json();
    if (data && data.error && data.error.message) message = data.error.message;
  } catch (e) { /* not JSON: the status says enough */ }
  return message;
}

async function changed(error, busy) {
  if (busy) busy.disabled = false;
  if (error) { say(error); return; }
  await loadPanel();
  refreshPage();
}

feature("connections", function () {
  on("click", "[data-open-connections]", function (e, opener) {
    const dialog = $("#connections-dialog");
    const menu = opener.closest("details");
    if (menu) menu.open = false;
    if (!dialog) return;
    if (!dialog.open) dialog.showModal();
    loadPanel();
  });

  on("submit", "form.connection-form", async function (e, form) {
    e.preventDefault();
    const data = new FormData(form);
    const body = {kind: form.dataset.kind, name: data.get("name"), url: data.get("url")};
    try {
      if (body.kind === "model") {
        body.key = data.get("key") || null;
        body.models = data.get("models") || "";
      } else {
        body.headers = parseHeaders(data.get("headers"));
      }
    } catch (err) { say(err.message); return; }
    const button = form.querySelector("button[type=submit]");
    if (button) button.disabled = true;
    say("");
    form.classList.add("busy");
    const error = await send("POST", "/api/connections", body);
    form.classList.remove("busy");
    await changed(error, button);
  });

  on("click", "[data-remove-connection]", async function (e, button) {
    button.disabled = true;
    const path = "/api/connections/" + encodeURIComponent(button.dataset.kind) + "/" + encodeURIComponent(button.dataset.name);
    await changed(await send("DELETE", path), button);
  });
});

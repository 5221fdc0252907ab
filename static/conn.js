// The connection indicator, and the catch-up the server sends as a socket's first frame (in
// order with the events after it, where a fetch of the page would race with them): the first
// socket names the runs the page shows as running; a reconnect, which may have missed
// events, asks for a full redraw.
import {$, $$, feature, socket} from "./core.js";

function setConn(state, text) {
  const el = $("#conn");
  if (!el) return;
  el.className = "conn conn-" + state;
  el.dataset.state = state;
  const label = $(".conn-text", el);
  if (label) label.textContent = text;
}

function catchUpQuery() {
  if (socket.opened > 0) return "&catchup=full";
  // Sub-agents' cards too: each is redrawn as it is now (it may have ended meanwhile).
  const live = $$("#transcript > section.turn[data-status=RUNNING], #transcript .sub-card[data-status=RUNNING]")
    .map(function (t) { return t.dataset.runId; }).filter(Boolean);
  return live.length ? "&live=" + encodeURIComponent(live.join(",")) : "";
}

// Socket frames may update a turn the page does not show (paged out, or redrawn away): such
// an update has nothing to change, so it is dropped here instead of making htmx report
// htmx:oobErrorNoTarget. The server marks what belongs to one turn (data-turn-part); any other
// missing target is still an error.
function defineOob() {
  htmx.defineExtension("braid-oob", {
    transformResponse: function (text, xhr) {
      if (xhr) return text;  // only socket frames (htmx calls this with no xhr for them)
      const tpl = document.createElement("template");
      tpl.innerHTML = text;
      let dropped = false;
      Array.from(tpl.content.children).forEach(function (child) {
        if (!child.hasAttribute("data-turn-part")) return;
        const spec = child.getAttribute("hx-swap-oob") || "";
        const at = spec.indexOf(":#");
        const id = at === -1 ? child.id : spec.slice(at + 2);
        if (id && !document.getElementById(id)) { child.remove(); dropped = true; }
      });
      return dropped ? tpl.innerHTML : text;
    },
  });
}

if (typeof htmx !== "undefined") defineOob();  // before htmx reads hx-ext on the page

feature("conn", function () {
  socket.query(catchUpQuery);
  document.addEventListener("htmx:wsConnecting", function () {
    if (socket.opened) setConn("reconnecting", "Reconnecting…");
  });
  document.addEventListener("htmx:wsOpen", function () { setConn("open", "Connected"); });
  document.addEventListener("htmx:wsClose", function () { setConn("reconnecting", "Reconnecting…"); });
  document.addEventListener("htmx:wsError", function () { setConn("reconnecting", "Reconnecting…"); });
});

// The sidebar's search results and dates (DESIGN §8): a click on a found message opens its
// session and jumps to its turn, loading older turns down to it when the page does not show
// it yet (GET /s/{id}/turns?run=), showing its branch first when it is on another one (a
// sibling run's); each session's last activity in the reader's words.
import {feature, on, sessionId, toast} from "./core.js";

function show(el) {
  const t = document.getElementById("transcript");
  if (t) t.dataset.follow = "0";  // the view stays at the found turn, not the end
  document.querySelectorAll("section.turn.turn-found").forEach(function (s) { s.classList.remove("turn-found"); });
  el.classList.add("turn-found");
  // Only the transcript scrolls: scrollIntoView would scroll the page as well (on a phone it
  // pushed the header off-screen and left a blank band under the composer).
  if (t) t.scrollTop += el.getBoundingClientRect().top - t.getBoundingClientRect().top;
}

// The turn on the branch shown, loading the older turns down to it when it is paged out.
async function find(runId) {
  const id = "turn-" + runId.replace(/[^A-Za-z0-9_-]/g, "-");
  const marker = document.getElementById("older-turns");
  if (!document.getElementById(id) && marker && window.htmx) {
    const url = marker.getAttribute("hx-get") + "&run=" + encodeURIComponent(runId);
    await htmx.ajax("GET", url, {target: "#older-turns", swap: "outerHTML"});
  }
  return document.getElementById(id);
}

function shownBranch() { const b = document.getElementById("branch-badge"); return b ? b.dataset.branch : ""; }

async function branchOf(runId) {
  const res = await fetch("/api/runs/" + encodeURIComponent(runId) + "?session_id=" + encodeURIComponent(sessionId()));
  if (!res.ok) return "";
  const run = await res.json();
  return run.branch || "";
}

// Show another branch as the sibling switcher does (a `checkout` over the socket), and
// wait for its transcript.
function checkout(ref) {
  return new Promise(function (resolve) {
    const form = document.createElement("form");
    form.hidden = true;
    form.setAttribute("ws-send", "");
    form.innerHTML = '<input type="hidden" name="action" value="checkout"><input type="hidden" name="ref">';
    form.elements.ref.value = ref;
    document.getElementById("app").appendChild(form);
    let timer = 0;
    function done() {
      document.removeEventListener("htmx:wsAfterMessage", heard);
      clearTimeout(timer);
      form.remove();
      resolve();
    }
    function heard() { if (shownBranch() === ref) done(); }
    document.addEventListener("htmx:wsAfterMessage", heard);
    timer = setTimeout(done, 15000);
    htmx.process(form);
    htmx.trigger(form, "submit");
  });
}

async function jump(runId) {
  let el = await find(runId);
  if (!el) {  // a sibling run, a sub-agent's: on another branch of the session
    const branch = await branchOf(runId);
    if (branch && branch !== shownBranch()) {
      await checkout(branch);
      el = await find(runId);
    }
  }
  if (el) show(el);
  else toast("That message is no longer on any branch shown here.");
}

function onHit(e, hit) {
  if (hit.dataset.sessionId !== sessionId() || e.ctrlKey || e.metaKey || e.shiftKey) return;
  e.preventDefault();
  document.body.classList.remove("sidebar-open");  // a phone's drawer: the turn in view
  history.replaceState(null, "", "#turn-" + hit.dataset.runId);
  jump(hit.dataset.runId);
}

// Today's time, "Yesterday", or a date; the exact time on hover.
function dayWords(then) {
  const today = new Date();
  const start = new Date(today.getFullYear(), today.getMonth(), today.getDate());
  const days = Math.ceil((start - then) / 86400000);
  if (then >= start) return then.toLocaleTimeString(undefined, {hour: "2-digit", minute: "2-digit"});
  if (days <= 1) return "Yesterday";
  const opts = {day: "numeric", month: "short"};
  if (then.getFullYear() !== today.getFullYear()) opts.year = "numeric";
  return then.toLocaleDateString(undefined, opts);
}

function refresh() {
  document.querySelectorAll("time.last-active[datetime]").forEach(function (t) {
    const then = new Date(t.getAttribute("datetime"));
    if (isNaN(then)) return;
    t.textContent = dayWords(then);
    t.title = then.toLocaleString(undefined, {dateStyle: "full", timeStyle: "medium"});
  });
}
feature("search", function () {
  on("click", "a.search-hit", onHit);
  // Opened from a result in another session: after the page has scrolled to its end.
  // The same for a link followed within the page (only its #turn- part changed).
  function fromHash() {
    const m = location.hash.match(/^#turn-([\w-]+)$/);
    if (m) requestAnimationFrame(function () { jump(m[1]); });
  }
  fromHash();
  window.addEventListener("hashchange", fromHash);
  refresh();
  document.addEventListener("htmx:afterSettle", refresh);
  document.addEventListener("htmx:oobAfterSwap", refresh);
  setInterval(refresh, 60000);
});

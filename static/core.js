// The page's core (docs/DESIGN.md "The page's modules"): what every feature module shares.
// A feature module imports what it needs from here and registers with `feature(name, init)`;
// `start()` (static/main.js) runs each init once the document is parsed. Nothing here touches
// the document at import time, so the pure parts (Keymap, DeltaBuffer, cutBlock, ToastShelf,
// dataFrame) run under `node --test` (tests/js/).

export function $(sel, root) { return (root || document).querySelector(sel); }
export function $$(sel, root) { return Array.from((root || document).querySelectorAll(sel)); }

// One delegated listener per use: `on("click", "[data-x]", fn)` calls fn(event, element)
// with the closest element matching the selector (listeners on document survive redraws).
export function on(type, selector, fn, options) {
  document.addEventListener(type, function (e) {
    const el = e.target instanceof Element ? e.target.closest(selector) : null;
    if (el) fn(e, el);
  }, options);
}

export function sessionId() { const app = document.getElementById("app"); return app ? app.dataset.sessionId : ""; }

// ---------------------------------------------------------------- features

const features = [];
let started = false;  // start() called
let running = false;  // the features' inits ran

// A feature module's entry: `init` runs once, after the document is parsed (or at once when
// the page has started already).
export function feature(name, init) {
  if (features.some(function (f) { return f.name === name; })) throw new Error("feature registered twice: " + name);
  features.push({name: name, init: init});
  if (running) init();
}

// ---------------------------------------------------------------- keymap

// One keydown listener arbitrates every key the page binds. Bindings are tried in `order`
// (lower first: the innermost thing open comes first, Stop last); the first whose `when`
// holds runs and ends the key's handling. A `native` binding ends it too but lets the browser
// act (a modal dialog's own Esc), so nothing behind the dialog reacts to the same key.
export class Keymap {
  constructor() { this.bindings = []; }

  bind(key, spec) {
    const b = {key: key, order: 50, native: false, name: key, ...spec};
    this.bindings.push(b);
    this.bindings.sort(function (x, y) { return x.order - y.order; });
    const list = this.bindings;
    return function unbind() { const i = list.indexOf(b); if (i !== -1) list.splice(i, 1); };
  }

  // The binding that handled `e` (its name), or null.
  handle(e) {
    if (e.isComposing) return null;
    for (const b of this.bindings) {
      if (b.key !== e.key || (b.when && !b.when(e))) continue;
      if (!b.native && e.preventDefault) e.preventDefault();
      if (b.run) b.run(e);
      return b.name;
    }
    return null;
  }
}

export const keymap = new Keymap();

// ---------------------------------------------------------------- toasts

// Which toasts stay: at most `max` that close by themselves (the oldest goes first), a toast
// saying what one shown says already replaces it (no stack of the same words), each goes after
// `ttl` ms; sticky ones (they offer an action) stay until dismissed and are not counted.
export class ToastShelf {
  constructor(max, ttl) { this.max = max; this.ttl = ttl; this.shown = []; }

  // Adds a toast; returns the keys of those it pushes out.
  add(key, text, sticky, now) {
    const out = [];
    this.shown = this.shown.filter(function (t) {
      if (t.sticky || t.text !== text) return true;
      out.push(t.key);
      return false;
    });
    this.shown.push({key: key, text: text, sticky: !!sticky, until: sticky ? Infinity : now + this.ttl});
    const passing = this.shown.filter(function (t) { return !t.sticky; });
    while (passing.length > this.max) out.push(this.remove(passing.shift().key));
    return out;
  }

  remove(key) { this.shown = this.shown.filter(function (t) { return t.key !== key; }); return key; }

  // Those whose time is up at `now`.
  expired(now) { return this.shown.filter(function (t) { return t.until <= now; }).map(function (t) { return t.key; }); }
}

const TOAST_MS = 5000;
const shelf = new ToastShelf(3, TOAST_MS);
const toastEls = new Map();  // key -> element
let toastSeq = 0;

function dropToast(key) {
  shelf.remove(key);
  const el = toastEls.get(key);
  toastEls.delete(key);
  if (el) el.remove();
}

// Shelves a toast element (made here, or drawn by the server into #toasts).
function shelve(el) {
  if (el.dataset.toastKey) return;
  const key = "t" + (++toastSeq);
  el.dataset.toastKey = key;
  toastEls.set(key, el);
  const text = (el.querySelector(".toast-text, span") || el).textContent.trim();
  shelf.add(key, text, el.classList.contains("toast-sticky"), Date.now()).forEach(dropToast);
  if (!el.classList.contains("toast-sticky")) setTimeout(expire, TOAST_MS + 50);
}

function expire() {
  // A toast under the pointer or holding focus stays until the reader leaves it.
  shelf.expired(Date.now()).forEach(function (key) {
    const el = toastEls.get(key);
    if (el && (el.matches(":hover") || el.contains(document.activeElement))) {
      setTimeout(expire, 1000);
      return;
    }
    dropToast(key);
  });
}

// A toast from the page's <template id="toast-template"> (base.html). level: error | info.
export function toast(text, opts) {
  const o = opts || {};
  const box = document.getElementById("toasts");
  const tpl = document.getElementById("toast-template");
  if (!box || !tpl) return null;
  const el = tpl.content.firstElementChild.cloneNode(true);
  el.classList.add("toast-" + (o.level || "error"));
  if (o.className) el.classList.add(...o.className.split(" "));
  if (o.level === "info") el.setAttribute("role", "status");
  el.querySelector(".toast-text").textContent = text;
  box.append(el);
  shelve(el);
  return el;
}

// ---------------------------------------------------------------- socket

// Frames that are data, not HTML: a JSON object with a `frame` kind (the server's
// web/render/frames.py). `{"frame": "append", "id": ..., "text": ...}` appends text to an
// element of the page. Anything else (HTML for htmx to swap) is null.
export function dataFrame(message) {
  if (typeof message !== "string" || message.charCodeAt(0) !== 123) return null;  // "{"
  try {
    const f = JSON.parse(message);
    return f && typeof f.frame === "string" ? f : null;
  } catch (err) {
    return null;
  }
}

const dataHandlers = new Map();
const beforeHtml = [];
const queryParts = [];

export const socket = {
  // fn(frame) for each data frame of that kind.
  onData: function (kind, fn) { dataHandlers.set(kind, fn); },
  // fn() before an HTML frame is swapped in (what came before it is shown first).
  beforeHtml: function (fn) { beforeHtml.push(fn); },
  // fn() -> "&k=v" added to the socket's URL each time it (re)connects.
  query: function (fn) { queryParts.push(fn); },
  // fn(event) after each HTML frame was swapped in.
  afterHtml: function (fn) { document.addEventListener("htmx:wsAfterMessage", fn); },
  opened: 0,
};

function startSocket() {
  document.addEventListener("htmx:wsBeforeMessage", function (e) {
    const f = dataFrame(e.detail && e.detail.message);
    if (!f) { beforeHtml.forEach(function (fn) { fn(); }); return; }
    e.preventDefault();
    const fn = dataHandlers.get(f.frame);
    if (fn) fn(f);
  });
  if (window.htmx && htmx.createWebSocket) {
    const create = htmx.createWebSocket;
    htmx.createWebSocket = function (url) {
      return create(url + queryParts.map(function (fn) { return fn(); }).join(""));
    };
  }
  document.addEventListener("htmx:wsOpen", function () { socket.opened += 1; });
}

// ---------------------------------------------------------------- per-turn controls

// A turn's controls are drawn once a page, not once a turn (issue 30: they were half of a
// turn's markup). A menu's contents come from a <template> of the page (_turn_pops.html) and
// are put into the <details> when it is first opened (on the click that opens it, a mouse's or
// Enter / Space on its summary), filled from the menu's data attributes by `fill(pop, menu)`.
export function fillOnce(menu, templateId, popSelector, fill) {
  if (menu.querySelector(popSelector)) return null;
  const template = document.getElementById(templateId);
  if (!template) return null;
  const pop = template.content.firstElementChild.cloneNode(true);
  fill(pop, menu);
  menu.appendChild(pop);
  if (window.htmx) htmx.process(pop);
  return pop;
}

// A button that is an action (a chip's diff, its own Revert, Regenerate, a toast's "… anyway")
// sends it through the page's one `<form ws-send id="act-form">` (_turn_pops.html, inside the
// socket's element): `values` are the frame ({action, ...}); `from` is the element it acts
// for (its turn's footer is where focus goes on, menus.js).
export function sendAction(values, from) {
  const form = document.getElementById("act-form");
  if (!form || !window.htmx) return false;
  const footer = from && from.closest ? from.closest("[id^=footer-]") : null;
  form.dataset.footer = footer ? footer.id : "";
  form.dataset.action = values.action;
  form.setAttribute("hx-vals", JSON.stringify(values));
  htmx.trigger(form, "submit");
  return true;
}

// ---------------------------------------------------------------- streamed text

// Appended text is cut into blocks so that appending lays out only the last block: a block
// past `limit` characters is cut after its last line end (else its last space). The index to
// cut after, or -1 to keep the block whole.
export function cutBlock(data, limit) {
  if (data.length <= limit) return -1;
  let cut = data.lastIndexOf("\n");
  if (cut < limit / 2) cut = data.lastIndexOf(" ");
  return cut > 0 && cut < data.length - 1 ? cut : -1;
}

// Text waiting to be shown, per element id, joined in arrival order and taken once a frame.
export class DeltaBuffer {
  constructor() { this.pending = new Map(); }
  add(id, text) { this.pending.set(id, (this.pending.get(id) || "") + text); }
  get size() { return this.pending.size; }
  take() { const batch = this.pending; this.pending = new Map(); return batch; }
}

// Appends `text` to `el` as text (never parsed as HTML), in blocks of `limit` characters.
export function appendText(el, text, limit) {
  let block = el.lastElementChild;
  if (!block || !block.classList.contains("live-block")) {
    // The page drew the text so far (a reload mid-stream): it becomes the first block.
    block = document.createElement("div");
    block.className = "live-block";
    block.append(document.createTextNode(el.textContent));
    el.replaceChildren(block);
  }
  let node = block.lastChild;
  if (!node || node.nodeType !== 3) { node = document.createTextNode(""); block.append(node); }
  node.appendData(text);
  const cut = cutBlock(node.data, limit);
  if (cut !== -1) {
    const next = document.createElement("div");
    next.className = "live-block";
    next.append(document.createTextNode(node.data.slice(cut + 1)));
    node.deleteData(cut + 1, node.data.length - cut - 1);
    el.append(next);
  }
}

// ---------------------------------------------------------------- start

function startKeys() {
  // Capture phase: decided before anything else (a dialog's own Esc) reacts to the key.
  window.addEventListener("keydown", function (e) { keymap.handle(e); }, true);
}

function startToasts() {
  const box = document.getElementById("toasts");
  if (!box) return;
  $$(".toast", box).forEach(shelve);
  // Toasts the server draws (a frame swapped into #toasts) join the shelf too.
  new MutationObserver(function (records) {
    records.forEach(function (r) {
      r.addedNodes.forEach(function (n) { if (n.nodeType === 1 && n.classList.contains("toast")) shelve(n); });
      r.removedNodes.forEach(function (n) { if (n.nodeType === 1 && n.dataset.toastKey) { shelf.remove(n.dataset.toastKey); toastEls.delete(n.dataset.toastKey); } });
    });
  }).observe(box, {childList: true});
  on("click", ".toast-close", function (e, btn) { btn.closest(".toast").remove(); });
  // Their height, for the History sheet on a phone to keep room for them (layout.css).
  if (window.ResizeObserver) {
    new ResizeObserver(function () {
      const h = box.childElementCount ? box.getBoundingClientRect().height + 8 : 0;
      document.documentElement.style.setProperty("--toasts-h", h + "px");
    }).observe(box);
  }
}

export function start() {
  if (started) return;
  started = true;
  startKeys();
  startSocket();
  function run() {
    running = true;
    startToasts();
    features.forEach(function (f) { f.init(); });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", run);
  else run();
}

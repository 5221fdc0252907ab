// The session menu (rename, archive, delete with a confirmation dialog), dialogs, the tab's
// title, the skip link, focus kept on a redrawn footer, and Esc: it closes what is open, the
// innermost first, and stops the run when nothing is (the keymap's order, core.js).
import {$$, feature, keymap, on} from "./core.js";

const MENUS = "details.session-menu[open], details.revert-menu[open], details.rewind-menu[open], " +
  "details.edit-rerun[open], details.spawn[open]";

feature("menus", function () {
  on("click", "[data-open-dialog]", function (e, opener) {
    const dialog = document.querySelector(opener.dataset.openDialog);
    const menu = opener.closest("details");
    if (menu) menu.open = false;
    if (dialog && !dialog.open) dialog.showModal();
  });
  on("click", "[data-close-dialog]", function (e, closer) { closer.closest("dialog").close(); });
  on("click", "[data-close-details]", function (e, cancel) { cancel.closest("details").open = false; });
  document.addEventListener("click", function (e) {
    // A click outside an open session menu closes it.
    $$("details.session-menu[open]").forEach(function (d) { if (!d.contains(e.target)) d.open = false; });
  });

  // A modal dialog closes by the browser's own Esc; nothing behind it reacts to that key.
  keymap.bind("Escape", {name: "dialog", order: 30, native: true,
    when: function () { return !!document.querySelector("dialog[open]"); }});
  keymap.bind("Escape", {name: "close-menu", order: 40,
    when: function () { return !!document.querySelector(MENUS); },
    run: function () {
      $$(MENUS).forEach(function (d) {
        d.open = false;
        const summary = d.querySelector("summary");
        if (summary && d.classList.contains("session-menu")) summary.focus();
      });
    }});
  keymap.bind("Escape", {name: "stop", order: 100,
    when: function () { return !!document.getElementById("stop-btn"); },
    run: function () { document.getElementById("stop-btn").click(); }});

  document.addEventListener("htmx:wsAfterSend", function (e) {
    const form = e.target && e.target.closest ? e.target.closest("form") : null;
    // A sent menu's popover closes (a revert refused later must not leave it open behind its
    // conflict toast).
    const menu = form && form.closest("details.session-menu, details.revert-menu");
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
      // The name as the header shows it now (a first turn, a checkout or an Edit & rerun may
      // have named the session since the menu was drawn).
      const title = document.getElementById("session-title");
      if (input && title && title.dataset.title) input.value = title.dataset.title;
      if (input) { input.focus(); input.select(); }
    }
  }, true);

  on("click", "[data-skip]", function (e, skip) {
    const target = document.querySelector(skip.getAttribute("href"));
    if (target) { e.preventDefault(); target.focus(); }
  });

  // The footer (Revert/Redo) of a turn is redrawn after a revert or redo: focus goes on to its
  // new control (Redo after a revert, Revert after a redo), not to the page or a chip.
  let refocus = null;
  document.addEventListener("htmx:wsAfterSend", function (e) {
    const form = e.target && e.target.closest ? e.target.closest("form") : null;
    if (!form) return;
    // A form in the footer, or #act-form sending a footer's button (core.js sendAction).
    const footer = form.closest("[id^=footer-]") ||
      (form.dataset.footer ? document.getElementById(form.dataset.footer) : null);
    const input = form.querySelector("input[name=action]");
    const action = input ? input.value : form.dataset.action;
    if (!footer || !action) return;
    if (action === "revert_turn") refocus = {footer: footer.id, want: ".redo-btn"};
    else if (action === "unrevert_turn") refocus = {footer: footer.id, want: ".revert-btn"};
  });
  document.addEventListener("htmx:oobAfterSwap", function (e) {
    const target = e.detail && e.detail.target;
    if (!refocus || !target || target.id !== refocus.footer) return;
    const next = document.querySelector("#" + refocus.footer + " " + refocus.want);
    refocus = null;
    if (next) next.focus();
  });
});

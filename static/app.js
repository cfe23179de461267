// TaskPilots Handoff console behaviour. The Content-Security-Policy forbids
// inline scripts, so everything the pages need lives here.
(function () {
  "use strict";

  // htmx configuration. It is read when htmx initialises on DOMContentLoaded,
  // which runs after this deferred script.
  if (window.htmx) {
    var cfg = window.htmx.config;
    // Indicator styles are in app.css; htmx's injected <style> would be
    // blocked by the CSP.
    cfg.includeIndicatorStyles = false;
    // No eval-based features (hx-on, js: values): the CSP blocks them anyway.
    cfg.allowEval = false;
    cfg.allowScriptTags = false;
    cfg.selfRequestsOnly = true;
    // Forms answer 422 (invalid input) and 409 (stale version) with the
    // re-rendered form carrying inline errors, so those responses are swapped.
    cfg.responseHandling = [
      { code: "204", swap: false },
      { code: "[23]..", swap: true },
      { code: "422", swap: true, error: false },
      { code: "409", swap: true, error: false },
      { code: "[45]..", swap: false, error: true },
      { code: "...", swap: false }
    ];
  }

  function csrfToken() {
    var m = document.querySelector('meta[name="csrf-token"]');
    return m ? m.getAttribute("content") : "";
  }

  // Every htmx request carries the CSRF token as a header.
  document.addEventListener("htmx:configRequest", function (evt) {
    var token = csrfToken();
    if (token) {
      evt.detail.headers["X-CSRF-Token"] = token;
    }
  });

  // Failed htmx requests get a calm banner instead of silently doing nothing.
  document.addEventListener("htmx:responseError", function (evt) {
    showBanner("The request failed (" + evt.detail.xhr.status + "). Reload the page and try again.");
  });
  document.addEventListener("htmx:sendError", function () {
    showBanner("The server could not be reached. Check your connection and try again.");
  });

  function showBanner(text) {
    var region = document.getElementById("banners");
    if (!region) {
      return;
    }
    var div = document.createElement("div");
    div.className = "banner banner-error";
    div.setAttribute("role", "alert");
    div.textContent = text;
    region.replaceChildren(div);
  }

  // Forms and buttons with data-confirm ask before submitting.
  document.addEventListener("submit", function (evt) {
    var form = evt.target;
    var submitter = evt.submitter;
    var msg = (submitter && submitter.getAttribute("data-confirm")) || form.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) {
      evt.preventDefault();
    }
  }, true);

  // Bulk actions (the form works without this): "Select all on this page",
  // a count of the ticked rows, and no live refresh of the inbox while rows
  // are ticked, since the refresh replaces the list and its checkboxes.
  function bulkBoxes() {
    return Array.prototype.slice.call(document.querySelectorAll('[data-testid="bulk-select"]'));
  }
  function bulkUpdate() {
    var n = bulkBoxes().filter(function (b) { return b.checked; }).length;
    var count = document.querySelector("[data-bulk-count]");
    if (count) {
      count.hidden = n === 0;
      count.textContent = n + " selected.";
    }
  }
  document.addEventListener("DOMContentLoaded", function () {
    var all = document.querySelector("[data-bulk-select-all]");
    if (all && bulkBoxes().length > 0) {
      all.hidden = false;
      all.addEventListener("click", function () {
        var boxes = bulkBoxes();
        var every = boxes.every(function (b) { return b.checked; });
        boxes.forEach(function (b) { b.checked = !every; });
        bulkUpdate();
      });
    }
    bulkUpdate();
  });
  document.addEventListener("change", function (evt) {
    if (evt.target && evt.target.matches && evt.target.matches('[data-testid="bulk-select"]')) {
      bulkUpdate();
    }
  });
  document.addEventListener("htmx:beforeRequest", function (evt) {
    if (evt.target && evt.target.id === "inbox-list" && bulkBoxes().some(function (b) { return b.checked; })) {
      evt.preventDefault();
    }
  });

  // Elements with data-autosubmit submit their form when changed (filters).
  document.addEventListener("change", function (evt) {
    var el = evt.target;
    if (el && el.hasAttribute && el.hasAttribute("data-autosubmit") && el.form) {
      el.form.requestSubmit();
    }
  });

  // A box that scrolls on its own (a wide table, a long JSON document) must
  // be reachable with the keyboard, or keyboard users cannot read what is
  // cut off (WCAG 2.1.1; axe's scrollable-region-focusable). Only boxes that
  // overflow now become tab stops, named after their table's caption; the
  // check runs again after htmx swaps, when a <details> opens (the audit
  // rows' JSON) and when the window is resized.
  var scrollBoxes = ".table-wrap, pre.json";
  function markScrollable() {
    document.querySelectorAll(scrollBoxes).forEach(function (el) {
      var overflows = el.scrollWidth > el.clientWidth + 1 || el.scrollHeight > el.clientHeight + 1;
      if (overflows && !el.hasAttribute("tabindex")) {
        el.setAttribute("tabindex", "0");
        el.setAttribute("data-scroll-focus", "");
        if (!el.hasAttribute("role")) {
          el.setAttribute("data-scroll-focus", "region");
          var caption = el.querySelector("caption");
          el.setAttribute("role", "region");
          el.setAttribute("aria-label", caption ? caption.textContent.trim() : (el.getAttribute("data-field") || "scrollable content"));
        }
      } else if (!overflows && el.hasAttribute("data-scroll-focus")) {
        el.removeAttribute("tabindex");
        if (el.getAttribute("data-scroll-focus") === "region") {
          el.removeAttribute("role");
          el.removeAttribute("aria-label");
        }
        el.removeAttribute("data-scroll-focus");
      }
    });
  }
  var resizeTimer;
  document.addEventListener("DOMContentLoaded", markScrollable);
  document.addEventListener("htmx:afterSettle", markScrollable);
  // toggle does not bubble: listen in the capture phase.
  document.addEventListener("toggle", markScrollable, true);
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(markScrollable, 150);
  });
})();

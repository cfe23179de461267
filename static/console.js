// Support console keyboard shortcuts. Everything works without this file;
// it only adds speed: j/k move through the inbox, Enter opens the selected
// session, c claims on the session page, ? toggles the help dialog.
// The Content-Security-Policy forbids inline scripts, so it lives here.
(function () {
  "use strict";

  var SELECTED_KEY = "console.inbox.selected";

  function rows() {
    return Array.prototype.slice.call(document.querySelectorAll('[data-testid="inbox-row"]'));
  }

  function rowLink(row) {
    return row.querySelector("a.row-link");
  }

  function selectedIndex(list) {
    var id = sessionStorage.getItem(SELECTED_KEY);
    for (var i = 0; i < list.length; i++) {
      if (list[i].getAttribute("data-session-id") === id) {
        return i;
      }
    }
    return -1;
  }

  // mark highlights a row and remembers it, so that the ten-second refresh,
  // which replaces the list, can restore the selection.
  function mark(list, index, focus) {
    list.forEach(function (r, i) {
      r.classList.toggle("is-selected", i === index);
    });
    var row = list[index];
    if (!row) {
      return;
    }
    sessionStorage.setItem(SELECTED_KEY, row.getAttribute("data-session-id"));
    var link = rowLink(row);
    if (focus && link) {
      link.focus({ preventScroll: true });
      row.scrollIntoView({ block: "nearest" });
    }
  }

  function move(delta) {
    var list = rows();
    if (list.length === 0) {
      return;
    }
    var i = selectedIndex(list);
    var active = document.activeElement;
    for (var j = 0; j < list.length; j++) {
      if (list[j].contains(active)) {
        i = j;
      }
    }
    i = i < 0 ? (delta > 0 ? 0 : list.length - 1) : Math.min(list.length - 1, Math.max(0, i + delta));
    mark(list, i, true);
  }

  function openSelected() {
    var list = rows();
    var i = selectedIndex(list);
    var link = i >= 0 ? rowLink(list[i]) : null;
    if (link) {
      window.location.assign(link.getAttribute("href"));
      return true;
    }
    return false;
  }

  function toggleHelp() {
    var d = document.getElementById("shortcuts-help");
    if (!d || typeof d.showModal !== "function") {
      return;
    }
    if (d.open) {
      d.close();
    } else {
      d.showModal();
    }
  }

  function press(name) {
    var btn = document.querySelector('[data-shortcut="' + name + '"]');
    if (btn && btn.form) {
      btn.form.requestSubmit(btn);
    }
  }

  function claim() {
    press("claim");
  }

  // Ctrl+Enter (Cmd+Enter) in a decision form submits it and opens the
  // next session of the inbox ("Submit and next"); in other forms it just
  // submits.
  document.addEventListener("keydown", function (evt) {
    if (evt.key !== "Enter" || !(evt.ctrlKey || evt.metaKey) || !evt.target || !evt.target.form) {
      return;
    }
    var form = evt.target.form;
    var next = form.querySelector('[data-shortcut="next"]');
    form.requestSubmit(next || undefined);
    evt.preventDefault();
  });

  function typing(el) {
    if (!el) {
      return false;
    }
    var tag = el.tagName;
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || el.isContentEditable;
  }

  document.addEventListener("keydown", function (evt) {
    if (evt.defaultPrevented || evt.ctrlKey || evt.metaKey || evt.altKey || typing(evt.target)) {
      return;
    }
    var help = document.getElementById("shortcuts-help");
    if (help && help.open && evt.key !== "?") {
      return; // the dialog handles its own keys (Esc closes it)
    }
    switch (evt.key) {
      case "j":
        move(1);
        break;
      case "k":
        move(-1);
        break;
      case "Enter":
        // A focused link or button already does the right thing.
        if (evt.target && evt.target.closest && evt.target.closest("a, button")) {
          return;
        }
        if (!openSelected()) {
          return;
        }
        break;
      case "c":
        claim();
        break;
      case "a":
        press("accept");
        break;
      case "?":
        toggleHelp();
        break;
      default:
        return;
    }
    evt.preventDefault();
  });

  // After the live refresh swaps the list, restore the highlight and, if the
  // user was in the list, the focus, without scrolling.
  document.addEventListener("htmx:afterSettle", function (evt) {
    if (!evt.target || evt.target.id !== "inbox-list") {
      return;
    }
    var list = rows();
    var i = selectedIndex(list);
    if (i >= 0) {
      var hadFocus = document.activeElement === document.body;
      mark(list, i, false);
      if (hadFocus) {
        var link = rowLink(list[i]);
        if (link) {
          link.focus({ preventScroll: true });
        }
      }
    }
  });

  // A click in the list selects that row too.
  document.addEventListener("focusin", function (evt) {
    var row = evt.target && evt.target.closest ? evt.target.closest('[data-testid="inbox-row"]') : null;
    if (row) {
      var list = rows();
      mark(list, list.indexOf(row), false);
    }
  });

  // Bring the conflict banner to the keyboard and screen reader user first.
  document.addEventListener("DOMContentLoaded", function () {
    var banner = document.getElementById("conflict-banner");
    if (banner) {
      banner.focus();
    }
    var list = rows();
    var i = selectedIndex(list);
    if (i >= 0) {
      mark(list, i, false);
    }
  });
})();

// The inbox's live refresh (every ten seconds, issue 14): rows that arrive
// with a refresh are highlighted until the user opens or selects them, and
// a select the user is working with is not replaced under them. The title
// and every count arrive with the list from the server (views.InboxFragment).
(function () {
  "use strict";

  var ROW = '[data-testid="inbox-row"]';
  var known = null; // ids listed so far on this page
  var fresh = {}; // ids that arrived with a refresh, not yet looked at
  var polled = false; // whether the request in flight is the live refresh

  function ids() {
    return Array.prototype.map.call(document.querySelectorAll(ROW), function (r) {
      return r.getAttribute("data-session-id");
    });
  }

  function remember(list) {
    known = {};
    list.forEach(function (id) {
      known[id] = true;
    });
  }

  function paint() {
    Array.prototype.forEach.call(document.querySelectorAll(ROW), function (r) {
      var isNew = fresh[r.getAttribute("data-session-id")] === true;
      r.classList.toggle("is-new", isNew);
      if (isNew) {
        r.setAttribute("data-new", "true");
      } else {
        r.removeAttribute("data-new");
      }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    remember(ids());
  });

  document.addEventListener("htmx:beforeRequest", function (evt) {
    if (evt.detail && evt.detail.elt && evt.detail.elt.id === "inbox-list") {
      polled = true;
    } else if (evt.detail && evt.detail.elt && evt.detail.elt.closest && evt.detail.elt.closest('[data-testid="inbox-filter-form"]')) {
      polled = false;
    }
  });

  document.addEventListener("htmx:afterSettle", function (evt) {
    if (!evt.target || evt.target.id !== "inbox-list") {
      return;
    }
    var list = ids();
    if (polled && known) {
      list.forEach(function (id) {
        if (!known[id]) {
          fresh[id] = true;
        }
      });
    } else {
      // A new search or filter lists other rows; none of them "arrived".
      fresh = {};
    }
    list.forEach(function (id) {
      known[id] = true;
    });
    polled = false;
    paint();
  });

  // Looking at a row (focus, click, j/k) takes its highlight away.
  document.addEventListener("focusin", function (evt) {
    var row = evt.target && evt.target.closest ? evt.target.closest(ROW) : null;
    if (row && fresh[row.getAttribute("data-session-id")]) {
      delete fresh[row.getAttribute("data-session-id")];
      paint();
    }
  });

  // Never swap a control out of band while the user is in it (an open
  // select would close under the pointer); the next refresh brings its
  // counts.
  document.addEventListener("htmx:oobBeforeSwap", function (evt) {
    var target = evt.detail && evt.detail.target;
    if (target && target.contains && target.contains(document.activeElement) && document.activeElement !== document.body) {
      evt.detail.shouldSwap = false;
    }
  });
})();

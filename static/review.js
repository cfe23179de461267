// Reviewer keyboard scoring. Everything works without this file; it only
// adds speed. On a review item: 1–5 score the focused criterion (or the first
// one without a score) and move to the next; after the last criterion the
// comment field takes the focus; Enter saves the score, and the server opens
// the next item. On the queue: n claims the oldest item and opens it.
// The Content-Security-Policy forbids inline scripts, so it lives here.
(function () {
  "use strict";

  var form = document.querySelector("form[data-review-form]");
  var groups = form ? Array.prototype.slice.call(form.querySelectorAll("fieldset[data-criterion]:not([disabled])")) : [];

  function groupOf(el) {
    return el && el.closest ? el.closest("fieldset[data-criterion]") : null;
  }

  function firstUnscored() {
    for (var i = 0; i < groups.length; i++) {
      if (!groups[i].querySelector("input:checked")) {
        return groups[i];
      }
    }
    return null;
  }

  function focusGroup(g) {
    var radio = g.querySelector("input:checked") || g.querySelector("input[type=radio]");
    if (radio) {
      radio.focus({ preventScroll: true });
      g.scrollIntoView({ block: "nearest" });
    }
  }

  function typing(el) {
    if (!el || groupOf(el)) {
      return false;
    }
    var tag = el.tagName;
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || el.isContentEditable;
  }

  function score(g, value) {
    var radio = g.querySelector('input[type=radio][value="' + value + '"]');
    if (!radio) {
      return;
    }
    radio.checked = true;
    radio.dispatchEvent(new Event("change", { bubbles: true }));
    var i = groups.indexOf(g);
    if (i >= 0 && i + 1 < groups.length) {
      focusGroup(groups[i + 1]);
      return;
    }
    var comment = form.querySelector('[name="comment"]');
    if (comment) {
      comment.focus();
    }
  }

  document.addEventListener("keydown", function (evt) {
    if (evt.defaultPrevented || evt.ctrlKey || evt.metaKey || evt.altKey) {
      return;
    }
    var t = evt.target;
    if (!form) {
      // The queue: n opens the next item.
      if (evt.key === "n" && !typing(t)) {
        var next = document.querySelector('[data-shortcut="next-review"]');
        if (next && next.form) {
          evt.preventDefault();
          next.form.requestSubmit(next);
        }
      }
      return;
    }
    if (evt.key.length === 1 && evt.key >= "1" && evt.key <= "5") {
      var g = groupOf(t);
      if (!g) {
        if (typing(t)) {
          return; // a digit in the comment is just a digit
        }
        g = firstUnscored() || groups[0];
      }
      if (!g || groups.indexOf(g) < 0) {
        return;
      }
      evt.preventDefault();
      score(g, evt.key);
      return;
    }
    if (evt.key === "Enter") {
      if (t && t.closest && t.closest("a, button, textarea, summary")) {
        return; // those keep their own Enter
      }
      if (t === document.body || (t && t.form === form) || groupOf(t)) {
        evt.preventDefault();
        form.requestSubmit();
      }
    }
  });

  // Start where the work is: the first criterion without a score.
  if (groups.length > 0) {
    var start = firstUnscored();
    if (start) {
      focusGroup(start);
    }
  }
})();

// Times in the reader's time zone (issue 14). The server renders every
// <time datetime="…Z"> in UTC (or in the user's saved time zone, the
// fallback for pages read without script); this rewrites them to the
// browser's zone with Intl.DateTimeFormat. Absolute times (text ending in
// a zone name, "2026-11-30 09:25 UTC") get the local date and time; relative
// ones ("25m ago") keep their text. The title always keeps UTC, so the
// exact time anyone else sees is one hover away.
(function () {
  "use strict";

  var zone;
  try {
    zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  } catch (e) {
    return;
  }
  if (!zone) {
    return;
  }
  var lang = document.documentElement.lang || undefined;
  var absolute = new Intl.DateTimeFormat(lang, {
    year: "numeric", month: "short", day: "numeric",
    hour: "2-digit", minute: "2-digit", hourCycle: "h23",
    timeZone: zone, timeZoneName: "short"
  });

  function utc(d) {
    return d.toISOString().slice(0, 19).replace("T", " ") + " UTC";
  }

  var clock = new Intl.DateTimeFormat(lang, {
    hour: "2-digit", minute: "2-digit", hourCycle: "h23",
    timeZone: zone, timeZoneName: "short"
  });

  // Server-rendered absolute times: "2026-11-30 09:25 UTC" and "09:25 UTC"
  // (or the user's saved zone instead of UTC).
  var fullStamp = /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}(:\d{2})? \S+$/;
  var clockStamp = /^\d{1,2}:\d{2}(:\d{2})? \S+$/;

  function localize(root) {
    if (!root || !root.querySelectorAll) {
      return;
    }
    var els = root.querySelectorAll("time[datetime]:not([data-local])");
    for (var i = 0; i < els.length; i++) {
      var el = els[i];
      var d = new Date(el.getAttribute("datetime"));
      if (isNaN(d.getTime())) {
        continue;
      }
      var local = absolute.format(d);
      var text = el.textContent.trim();
      if (fullStamp.test(text)) {
        el.textContent = local;
        el.title = utc(d);
      } else if (clockStamp.test(text)) {
        el.textContent = clock.format(d);
        el.title = local + " · " + utc(d);
      } else {
        el.title = local + " · " + utc(d);
      }
      el.setAttribute("data-local", zone);
    }
  }

  function run() {
    localize(document);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", run);
  } else {
    run();
  }
  // Fragments htmx swaps in (the change notice, list pages) too.
  document.addEventListener("htmx:afterSettle", function (evt) {
    localize(evt.target);
  });
})();

// Admin pages: copy buttons for the secrets shown once (new tokens and
// passwords). Confirmations of dangerous forms are handled by app.js
// (data-confirm). The Content-Security-Policy forbids inline scripts.
(function () {
  "use strict";

  document.addEventListener("click", function (evt) {
    var btn = evt.target && evt.target.closest ? evt.target.closest("button[data-copy]") : null;
    if (!btn) {
      return;
    }
    var el = document.getElementById(btn.getAttribute("data-copy"));
    if (!el || !navigator.clipboard) {
      return;
    }
    navigator.clipboard.writeText(el.textContent.trim()).then(function () {
      btn.textContent = "Copied";
    }, function () {
      btn.textContent = "Select and copy by hand";
    });
  });

  // Select the secret on load, so Ctrl+C copies it at once.
  var secret = document.getElementById("secret-value");
  if (secret && window.getSelection) {
    var range = document.createRange();
    range.selectNodeContents(secret);
    var sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
  }
})();

// Verifies captured TaskPilots webhook deliveries with the standardwebhooks
// npm package, an implementation independent of ours (web/webhooks_test.go).
//
// Usage: node verify.js cases.json
// cases.json: [{"secret": "whsec_…", "headers": {"webhook-id": …}, "body": "<raw body>"}]
// Prints a JSON array with, per case, {"ok": true, "event_id": …} or
// {"ok": false, "error": "…"}.
"use strict";
const fs = require("fs");
const { Webhook } = require("standardwebhooks");

const cases = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const out = cases.map((c) => {
  try {
    const payload = new Webhook(c.secret).verify(c.body, c.headers);
    return { ok: true, event_id: payload.event_id };
  } catch (e) {
    return { ok: false, error: String(e && e.message ? e.message : e) };
  }
});
process.stdout.write(JSON.stringify(out));

// A controller: creates a session, delegates its first step and follows the
// event feed; it answers a request for input and exits when the step is
// completed (or the session ends).
//
//   TASKPILOTS_URL=http://localhost:8080 TASKPILOTS_CONTROLLER_TOKEN=tpk_… \
//     node dist/examples/controller.js [queue]
import { randomUUID } from "node:crypto";
import { Client, ConflictError } from "../src/index.js";

const queue = process.argv[2] ?? "refunds";
const tp = new Client({ baseUrl: process.env.TASKPILOTS_URL!, token: process.env.TASKPILOTS_CONTROLLER_TOKEN! });

const start = (await tp.events({ after: "now" })).next_cursor; // follow from here on
const s = await tp.createSession({
  goal: "Refund order 1182 if eligible", ticket_ref: `T-${randomUUID().slice(0, 6)}`,
  constraints: ["refunds over 200 EUR need a human"], facts: { order_total: "240 EUR" },
});
await tp.delegate(s.session_id, {
  queue, step: "check-eligibility", expected_version: s.state_version,
  instructions: "Decide whether order 1182 is eligible for a refund.",
});
console.log("session", s.session_id, "delegated to", queue);

for await (const ev of tp.feed({ after: start, session_id: s.session_id, wait_seconds: 10 })) {
  console.log(ev.seq, ev.type, ev.actor);
  if (ev.type === "result.needs_input") {
    const cur = await tp.getSession(s.session_id);
    try {
      await tp.provideInput(s.session_id, { expected_version: cur.state_version, answer: "yes, refund to the card", delegate: { queue, step: "check-eligibility" } });
    } catch (e) {
      if (!(e instanceof ConflictError)) throw e;
      console.log("someone else moved the session to version", e.currentVersion);
    }
  }
  if (["result.completed", "session.cancelled", "session.escalated"].includes(ev.type)) break;
}
console.log("final status:", (await tp.getSession(s.session_id)).status);

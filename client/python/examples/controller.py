"""A controller: creates a session, delegates its first step and follows the event feed.

    TASKPILOTS_URL=http://localhost:8080 TASKPILOTS_CONTROLLER_TOKEN=tpk_… \\
        python3 examples/controller.py [--queue refunds]

It answers a request for input (needs_input) and exits when the step is
completed (or the session ends). Writes carry idempotency keys and are
retried safely; a stale expected_version is a ConflictError with the
current version.
"""

from __future__ import annotations

import argparse
import os
import uuid


import taskpilots


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queue", default="refunds")
    args = ap.parse_args()
    tp = taskpilots.Client(os.environ["TASKPILOTS_URL"], os.environ["TASKPILOTS_CONTROLLER_TOKEN"])

    start = tp.events(after="now")["next_cursor"]  # follow from here on
    s = tp.create_session("Refund order 1182 if eligible", ticket_ref="T-" + uuid.uuid4().hex[:6],
                          constraints=["refunds over 200 EUR need a human"], facts={"order_total": "240 EUR"})
    sid = s["session_id"]
    tp.delegate(sid, queue=args.queue, step="check-eligibility", expected_version=s["state_version"],
                instructions="Decide whether order 1182 is eligible for a refund.")
    print("session", sid, "delegated to", args.queue)

    feed = tp.feed(after=start, session_id=sid, wait_seconds=10)
    for ev in feed:
        print(ev["seq"], ev["type"], ev["actor"])
        if ev["type"] == "result.needs_input":
            cur = tp.get_session(sid)
            try:
                tp.provide_input(sid, expected_version=cur["state_version"], answer="yes, refund to the card",
                                 delegate={"queue": args.queue, "step": "check-eligibility"})
            except taskpilots.ConflictError as e:
                print("someone else moved the session to version", e.current_version)
        if ev["type"] in ("result.completed", "session.cancelled", "session.escalated"):
            feed.close()
    print("final status:", tp.get_session(sid)["status"])
    tp.close()


if __name__ == "__main__":
    main()

"""A worker whose handler is shaped like an LLM call (no network).

    TASKPILOTS_URL=http://localhost:8080 TASKPILOTS_WORKER_TOKEN=tpk_… \\
        python3 examples/worker.py [--queue refunds] [--max-leases N]

The handler renders the context packet as a prompt (a real worker would send
it to a model, caching the stable prefix), "answers" it, and returns the
result contract. The Worker heartbeats while it runs, submits the result with
the lease's fencing token, and stops on SIGTERM after the current lease.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from typing import Any, Dict


import taskpilots


def fake_model(prompt: str) -> Dict[str, Any]:
    """Stands in for a model call: a structured answer and token usage."""
    return {"answer": {"eligible": "refund" in prompt.lower()}, "input_tokens": len(prompt) // 4}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queue", default="refunds")
    ap.add_argument("--max-leases", type=int, default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO)
    tp = taskpilots.Client(os.environ["TASKPILOTS_URL"], os.environ["TASKPILOTS_WORKER_TOKEN"])
    cached_prefix_hash = ""

    def handle(lease: taskpilots.Lease) -> Dict[str, Any]:
        nonlocal cached_prefix_hash
        prompt = tp.get_packet_prompt(lease.session_id)
        cached = prompt.prefix_bytes if prompt.prefix_hash == cached_prefix_hash else 0
        cached_prefix_hash = prompt.prefix_hash
        reply = fake_model(prompt.text + "\nStep: " + lease.step + "\n" + (lease.packet.get("instructions") or ""))
        if lease.lost.is_set():  # the lease was lost meanwhile: the result would be refused
            raise RuntimeError("lease lost")
        return {
            "result_type": "completed",
            "output": reply["answer"],
            "evidence": [{"claim": "model answer on packet v%s" % lease.packet.get("based_on_version"), "source": "fake-model"}],
            "uncertainty": {"level": 0.2, "notes": "no real model"},
            "usage": {"input_tokens": reply["input_tokens"], "cached_input_tokens": min(cached // 4, reply["input_tokens"])},
        }

    def report(o: taskpilots.Outcome) -> None:
        print(json.dumps({"delegation": o.lease.delegation_id, "answer": o.answer, "error": str(o.error) if o.error else None}))

    with tp:  # closes the connection pool at the end
        w = taskpilots.Worker(tp, queue=args.queue, handler=handle, on_result=report, wait_seconds=5)
        w.run(max_leases=args.max_leases)


if __name__ == "__main__":
    main()

// A worker loop: lease, heartbeat in the background while the handler runs,
// submit the result with the lease's fencing token. When a heartbeat is
// refused (the lease expired or was superseded) the handler's `signal`
// aborts and its result is dropped: another worker owns the delegation now
// and the server would refuse the stale token anyway.
import { hostname } from "node:os";
import type { Client, Lease, ResultRequest, SessionWritten } from "./client.js";
import { ConflictError, NotFoundError, TaskPilotsError } from "./errors.js";

/** The result contract without what the worker adds (lease_token, session_id, step may still be given). */
export type ResultBody = Omit<ResultRequest, "lease_token" | "session_id" | "step"> & Partial<Pick<ResultRequest, "lease_token" | "session_id" | "step">>;

/** A lease as handed to the handler. */
export interface LeaseContext extends Lease {
  /** Aborts when the lease is lost: stop work early, the result will be dropped. */
  signal: AbortSignal;
}

/** What became of one lease. */
export interface Outcome {
  lease: Lease;
  result?: ResultRequest;
  answer?: SessionWritten;
  error?: unknown;
}

/** The lease was lost while the handler ran; its result was not sent. */
export class LeaseLostError extends TaskPilotsError {}

/** Throw from a handler for a failed result of class permanent (no retry). */
export class PermanentFailure extends Error {}
/** Throw from a handler for a failed result of class bad_input (the session awaits input). */
export class BadInputFailure extends Error {}

export interface WorkerOptions {
  client: Client;
  queue: string;
  handler: (lease: LeaseContext) => Promise<ResultBody> | ResultBody;
  /** Recorded on leases (default host-pid). */
  name?: string;
  /** Long poll of each lease call, ≤ 30 (default 10). */
  waitSeconds?: number;
  /** Heartbeat every this fraction of the lease length (default 1/3). */
  heartbeatFraction?: number;
  onResult?: (o: Outcome) => void;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Leases from one queue and runs the handler on each delegation. */
export class Worker {
  readonly client: Client;
  readonly queue: string;
  readonly name: string;
  readonly outcomes: Outcome[] = [];
  private readonly opts: WorkerOptions;
  private stopped = false;

  constructor(opts: WorkerOptions) {
    this.opts = opts;
    this.client = opts.client;
    this.queue = opts.queue;
    this.name = opts.name ?? `${hostname()}-${process.pid}`;
  }

  /** Ask run() to return after the current lease call and handler. */
  stop(): void {
    this.stopped = true;
  }

  /**
   * Lease and handle until stop() (or SIGTERM/SIGINT with `handleSignals`),
   * or `maxLeases` leases. A running handler finishes and its result is sent.
   * Resolves to the number of leases handled.
   */
  async run(o: { maxLeases?: number; handleSignals?: boolean } = {}): Promise<number> {
    const onSignal = () => this.stop();
    if (o.handleSignals) {
      process.once("SIGTERM", onSignal);
      process.once("SIGINT", onSignal);
    }
    let handled = 0;
    try {
      while (!this.stopped && (o.maxLeases === undefined || handled < o.maxLeases)) {
        let got: Lease | null;
        try {
          got = await this.client.lease(this.queue, { worker: this.name, wait_seconds: this.opts.waitSeconds ?? 10 });
        } catch (e) {
          if (!(e instanceof TaskPilotsError)) throw e;
          console.warn(`taskpilots worker: lease failed: ${e.message}`);
          await sleep(1000);
          continue;
        }
        if (!got) continue;
        await this.work(got);
        handled++;
      }
    } finally {
      process.off("SIGTERM", onSignal);
      process.off("SIGINT", onSignal);
    }
    return handled;
  }

  /** Run the handler on one lease with heartbeats and submit its result. */
  async work(lease: Lease): Promise<Outcome> {
    const lost = new AbortController();
    const hb = this.heartbeat(lease, lost);
    let body: ResultBody;
    try {
      body = await this.opts.handler({ ...lease, signal: lost.signal });
    } catch (e) {
      const cls = e instanceof PermanentFailure ? "permanent" : e instanceof BadInputFailure ? "bad_input" : "transient";
      body = { result_type: "failed", failure: { class: cls, message: String((e as Error)?.message || e) } };
    } finally {
      hb.stop();
    }
    await hb.done;
    if (lost.signal.aborted) {
      return this.report({ lease, error: new LeaseLostError(`lease of ${lease.delegation_id} lost`) });
    }
    const result: ResultRequest = {
      ...body,
      lease_token: body.lease_token ?? lease.lease_token,
      session_id: body.session_id ?? lease.session_id,
      step: body.step ?? lease.step,
    };
    try {
      const answer = await this.client.submitResult(lease.delegation_id, result);
      return this.report({ lease, result, answer });
    } catch (error) {
      if (!(error instanceof TaskPilotsError)) throw error;
      return this.report({ lease, result, error });
    }
  }

  private report(o: Outcome): Outcome {
    this.outcomes.push(o);
    this.opts.onResult?.(o);
    return o;
  }

  private heartbeat(lease: Lease, lost: AbortController): { stop: () => void; done: Promise<void> } {
    let length = Date.parse(lease.lease_expires_at) - Date.now();
    if (!(length > 0)) length = 30_000; // the clocks disagree: assume the default lease
    const frac = this.opts.heartbeatFraction && this.opts.heartbeatFraction > 0 && this.opts.heartbeatFraction < 1 ? this.opts.heartbeatFraction : 1 / 3;
    const every = Math.max(length * frac, 200);
    let expires = Date.now() + length;
    let stopped = false;
    let timer: NodeJS.Timeout | undefined;
    let wake: () => void = () => {};
    const done = (async () => {
      while (!stopped) {
        await new Promise<void>((r) => { wake = r; timer = setTimeout(r, every); });
        if (stopped) return;
        try {
          await this.client.heartbeat(lease.delegation_id, lease.lease_token);
          expires = Date.now() + length;
        } catch (e) {
          if (e instanceof ConflictError || e instanceof NotFoundError) {
            lost.abort(new LeaseLostError(`heartbeat refused: ${e.message}`));
            return;
          }
          if (Date.now() >= expires) {
            lost.abort(new LeaseLostError("lease ran out without a heartbeat"));
            return;
          }
        }
      }
    })();
    return { stop: () => { stopped = true; clearTimeout(timer); wake(); }, done };
  }
}

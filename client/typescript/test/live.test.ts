// Tests against a real TaskPilots server: set TASKPILOTS_URL and
// TASKPILOTS_{ADMIN,CONTROLLER,WORKER}_TOKEN (cmd/taskpilots/sdk_test.go
// starts a server on PostgreSQL and does). Skipped without them, unless
// TASKPILOTS_SDK_REQUIRE_SERVER=1 makes that a failure.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash, randomUUID } from "node:crypto";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { createServer, request as httpRequest } from "node:http";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import type { AddressInfo } from "node:net";
import { Client, ConflictError, NotFoundError, PermissionDeniedError, ValidationError, WebhookVerificationError, Worker, verifyWebhook, type FeedEvent, type LeaseContext } from "../src/index.js";

const URL_ = process.env.TASKPILOTS_URL ?? "";
const TOK = { admin: process.env.TASKPILOTS_ADMIN_TOKEN ?? "", controller: process.env.TASKPILOTS_CONTROLLER_TOKEN ?? "", worker: process.env.TASKPILOTS_WORKER_TOKEN ?? "" };
const have = URL_ !== "" && TOK.admin !== "" && TOK.controller !== "" && TOK.worker !== "";
if (!have && process.env.TASKPILOTS_SDK_REQUIRE_SERVER === "1") {
  throw new Error("TASKPILOTS_URL and the three TASKPILOTS_*_TOKEN variables are required");
}
const skip = have ? false : "no server: set TASKPILOTS_URL and TASKPILOTS_{ADMIN,CONTROLLER,WORKER}_TOKEN";

const uniq = (p: string) => `${p}-${randomUUID().slice(0, 10)}`;
const ctl = new Client({ baseUrl: URL_, token: TOK.controller });
const wrk = new Client({ baseUrl: URL_, token: TOK.worker });
const adm = new Client({ baseUrl: URL_, token: TOK.admin });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const newSession = (goal = "Refund order 1182 if eligible", extra: Record<string, unknown> = {}) =>
  ctl.createSession({ goal, ticket_ref: uniq("T"), constraints: ["refunds over 200 EUR need a human"], ...extra });

test("lifecycle: delegate, lease with heartbeats, completed with next_step, needs_input, input, lease again", { skip }, async () => {
  const queue = uniq("ts");
  const s = await newSession();
  assert.equal(s.status, "open");
  const d = await ctl.delegate(s.session_id, { queue, step: "check-eligibility", expected_version: s.state_version, lease_seconds: 2 });
  assert.equal(d.status, "queued");
  // The handler outlives the 2 s lease: only the background heartbeats keep it.
  const w = new Worker({
    client: wrk, queue, name: "ts-w1", waitSeconds: 5,
    handler: async (l: LeaseContext) => {
      assert.equal(l.packet.goal, "Refund order 1182 if eligible");
      await sleep(3500);
      assert.equal(l.signal.aborted, false);
      return { result_type: "completed", output: { eligible: true }, evidence: [{ claim: "order paid", source: "orders-db:1182" }], next_step: "issue-refund" };
    },
  });
  assert.equal(await w.run({ maxLeases: 1 }), 1);
  const out = w.outcomes[0];
  assert.equal(out.error, undefined, String(out.error));
  assert.equal(out.result?.lease_token, out.lease.lease_token);
  let got = await ctl.getSession(s.session_id);
  assert.equal(got.status, "open");
  assert.match(JSON.stringify(got.state), /check-eligibility/);

  await ctl.delegate(s.session_id, { queue, step: "issue-refund", expected_version: got.state_version });
  const w2 = new Worker({ client: wrk, queue, name: "ts-w2", waitSeconds: 5, handler: () => ({ result_type: "needs_input", question: "Refund to card or voucher?" }) });
  await w2.run({ maxLeases: 1 });
  assert.equal(w2.outcomes[0].error, undefined);
  assert.equal(w2.outcomes[0].answer?.status, "awaiting_input");
  got = await ctl.getSession(s.session_id);
  const ans = await ctl.provideInput(s.session_id, { expected_version: got.state_version, answer: "voucher", delegate: { queue, step: "issue-refund" } });
  assert.equal(ans.status, "queued");
  const lease = await wrk.lease(queue, { worker: "ts-w3", wait_seconds: 5 });
  assert.ok(lease);
  assert.equal(lease.session_id, s.session_id);
  assert.equal(lease.packet.run_reason?.kind, "after_input");
  assert.match(JSON.stringify(lease.packet), /voucher/);
  assert.ok((await wrk.heartbeat(lease.delegation_id, lease.lease_token)).lease_expires_at);
  const res = await wrk.submitResult(lease.delegation_id, {
    lease_token: lease.lease_token, session_id: s.session_id, step: "issue-refund",
    result_type: "completed", output: { refunded: "voucher" }, evidence: [{ claim: "voucher issued" }],
  });
  assert.ok(res.state_version > ans.state_version);
});

test("SIGTERM while the handler runs: the handler finishes, its result is sent, run() resolves", { skip }, async () => {
  const queue = uniq("ts-term");
  const s = await newSession();
  await ctl.delegate(s.session_id, { queue, step: "finish-me", expected_version: s.state_version });
  const index = fileURLToPath(new URL("../src/index.js", import.meta.url));
  const script = `
    import { Client, Worker } from ${JSON.stringify(index)};
    const client = new Client({ baseUrl: process.env.TASKPILOTS_URL, token: process.env.TASKPILOTS_WORKER_TOKEN });
    const n = await new Worker({ client, queue: process.argv[1], waitSeconds: 5, handler: async () => {
      console.log("leased");
      await new Promise((r) => setTimeout(r, 1500));
      return { result_type: "completed", evidence: [{ claim: "finished after SIGTERM" }] };
    } }).run({ handleSignals: true });
    console.log("handled", n);`;
  const p = spawn(process.execPath, ["--input-type=module", "-e", script, queue], { stdio: ["ignore", "pipe", "inherit"] });
  const lines: string[] = [];
  const rl = createInterface({ input: p.stdout! });
  rl.on("line", (l) => {
    lines.push(l);
    if (l === "leased") p.kill("SIGTERM");
  });
  const [code, sig] = await once(p, "exit");
  assert.equal(sig, null, `killed by ${sig}: ${lines.join("\n")}`);
  assert.equal(code, 0);
  assert.deepEqual(lines, ["leased", "handled 1"]);
  assert.match(JSON.stringify((await ctl.getSession(s.session_id)).state.completed_steps), /finish-me/);
});

test("a stale write is a ConflictError with the current version", { skip }, async () => {
  const s = await newSession();
  const d = await ctl.delegate(s.session_id, { queue: uniq("ts"), step: "a", expected_version: s.state_version });
  const err = await ctl.cancel(s.session_id, { expected_version: s.state_version, reason: "stale" }).catch((e) => e);
  assert.ok(err instanceof ConflictError, String(err));
  assert.equal(err.status, 409);
  assert.equal(err.currentVersion, d.state_version);
  await ctl.cancel(s.session_id, { expected_version: err.currentVersion!, reason: "fresh" });
});

test("validation errors list every field; 404 and 403 are typed", { skip }, async () => {
  const s = await newSession();
  const err = await ctl.delegate(s.session_id, { queue: uniq("ts"), step: "a", expected_version: s.state_version, lease_seconds: 0, max_attempts: 99 }).catch((e) => e);
  assert.ok(err instanceof ValidationError, String(err));
  assert.ok(err.fields.includes("lease_seconds") && err.fields.includes("max_attempts"), err.message);
  await assert.rejects(ctl.getSession("ses_doesnotexist"), NotFoundError);
  await assert.rejects(wrk.createSession({ goal: "workers may not create sessions" }), PermissionDeniedError);
});

test("a late result with an expired lease's token is fenced off", { skip }, async () => {
  const queue = uniq("ts");
  const s = await newSession();
  await ctl.delegate(s.session_id, { queue, step: "slow", expected_version: s.state_version, lease_seconds: 1 });
  const first = await wrk.lease(queue, { worker: "ts-slow", wait_seconds: 5 });
  assert.ok(first);
  let second = null;
  const deadline = Date.now() + 20_000;
  while (!second && Date.now() < deadline) second = await wrk.lease(queue, { worker: "ts-fast", wait_seconds: 2 });
  assert.ok(second, "the expired lease was never offered again");
  assert.equal(second.attempt, 2);
  const body = { session_id: s.session_id, step: "slow", result_type: "completed" as const, evidence: [{ claim: "c" }] };
  await assert.rejects(wrk.submitResult(first.delegation_id, { ...body, lease_token: first.lease_token }), ConflictError);
  await assert.rejects(wrk.heartbeat(first.delegation_id, first.lease_token), ConflictError);
  await wrk.submitResult(second.delegation_id, { ...body, lease_token: second.lease_token });
});

test("batch lease and batched results: a fenced item gets its own 409, the rest commit", { skip }, async () => {
  const queue = uniq("ts");
  const sessions = [await newSession(), await newSession(), await newSession()];
  for (const s of sessions) await ctl.delegate(s.session_id, { queue, step: "triage", expected_version: s.state_version });
  const leases = await wrk.leaseBatch(queue, { worker: "ts-batch", max: 5 });
  assert.deepEqual(leases.map((l) => l.session_id).sort(), sessions.map((s) => s.session_id).sort());
  const items = leases.map((l) => ({
    delegation_id: l.delegation_id, lease_token: l.lease_token, session_id: l.session_id, step: "triage",
    result_type: "completed" as const, output: { ok: true }, evidence: [{ claim: "triaged" }],
  }));
  const answer = await wrk.submitResults([items[0], { ...items[1], lease_token: "lt_not_mine" }, items[2]]);
  assert.deepEqual(answer.map((e) => e.status), [200, 409, 200]);
  assert.equal((await ctl.getSession(leases[0].session_id)).status, "completed");
  assert.equal((await ctl.getSession(leases[1].session_id)).status, "running");
  const again = await wrk.submitResults([items[1]]);
  assert.deepEqual(again.map((e) => e.status), [200]);
});

test("scheduling, snooze, notes, packet formats, routes, metrics", { skip }, async () => {
  const queue = uniq("ts");
  const s = await newSession("Scheduled refund check");
  const d = await ctl.delegate(s.session_id, { queue, step: "later", expected_version: s.state_version, delay_seconds: 3600 });
  assert.equal(await wrk.lease(queue, { worker: "ts-early", wait_seconds: 0 }), null);
  const s2 = await newSession();
  await ctl.delegate(s2.session_id, { queue, step: "later", expected_version: s2.state_version, available_at: new Date(Date.now() + 3600_000).toISOString() });
  assert.equal(await wrk.lease(queue, { worker: "ts-early", wait_seconds: 0 }), null);

  await ctl.addNote(s.session_id, { text: "customer is a VIP", evidence: { claim: "CRM tier", source: "crm" } });
  assert.match(JSON.stringify((await wrk.getPacket(s.session_id)).notes), /customer is a VIP/);
  const p = await wrk.getPacketPrompt(s.session_id);
  assert.ok(p.prefixBytes > 0);
  const prefix = Buffer.from(p.text).subarray(0, p.prefixBytes);
  assert.equal(createHash("sha256").update(prefix).digest("hex"), p.prefixHash);
  assert.match(prefix.toString(), /Scheduled refund check/);

  const cur = await ctl.getSession(s.session_id);
  const snoozed = await ctl.snooze(s.session_id, { expected_version: cur.state_version, until: new Date(Date.now() + 7200_000), reason: "wait for the bank" });
  assert.equal(snoozed.status, "paused");
  assert.ok(snoozed.state_version > d.state_version);

  const step = uniq("route");
  assert.equal((await ctl.putRoute(step, { queue, instructions: "route me" })).queue, queue);
  assert.equal((await ctl.getRoute(step)).step, step);
  assert.match(JSON.stringify(await ctl.listRoutes()), new RegExp(step));
  await ctl.deleteRoute(step);
  await assert.rejects(ctl.getRoute(step), NotFoundError);
  assert.equal(typeof (await ctl.metrics({ window: "24h" })), "object");
  await assert.rejects(ctl.metrics({ window: "1y" as "24h" }), ValidationError);
});

test("session list: keyset paging", { skip }, async () => {
  const word = "pg" + randomUUID().replace(/-/g, "").slice(0, 10);
  const ids = new Set<string>();
  for (let i = 0; i < 5; i++) ids.add((await newSession(`Paging check ${word} ${i}`)).session_id);
  const page = await ctl.listSessions({ q: word, limit: 2 });
  assert.equal(page.sessions.length, 2);
  assert.ok(page.next_cursor);
  const seen: string[] = [];
  for await (const x of ctl.iterSessions({ q: word, limit: 2 })) seen.push(x.session_id);
  assert.equal(seen.length, 5);
  assert.deepEqual(new Set(seen), ids);
  const err = await ctl.listSessions({ limit: 501 }).catch((e) => e);
  assert.ok(err instanceof ValidationError && err.fields.includes("limit"), String(err));
});

test("feed: following next_cursor sees the events", { skip }, async () => {
  const start = (await ctl.events({ after: "now" })).next_cursor;
  const s = await newSession();
  await ctl.delegate(s.session_id, { queue: uniq("ts"), step: "a", expected_version: s.state_version });
  const types: string[] = [];
  let cursor = start;
  const ac = new AbortController();
  const deadline = Date.now() + 20_000;
  for await (const ev of ctl.feed({ after: start, session_id: s.session_id, limit: 1, wait_seconds: 2, onCursor: (c) => (cursor = c) }, { signal: ac.signal })) {
    types.push((ev as FeedEvent).type);
    if (types.includes("delegation.created") || Date.now() > deadline) break;
  }
  assert.deepEqual(types.slice(0, 2), ["session.created", "delegation.created"]);
  assert.notEqual(cursor, start);
  const rest: FeedEvent[] = [];
  for await (const ev of ctl.feed({ after: cursor, session_id: s.session_id, wait_seconds: 1, stopWhenIdle: true })) rest.push(ev);
  assert.deepEqual(rest, []);
});

test("retries reuse the idempotency key: a lost answer does not create twice", { skip }, async () => {
  // A proxy forwards the first create and answers 503, as if the answer was lost.
  const seen: string[] = [];
  const up = new URL(URL_);
  const proxy = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      seen.push(String(req.headers["idempotency-key"] ?? ""));
      const fwd = httpRequest({ host: up.hostname, port: up.port, path: req.url, method: req.method, headers: req.headers }, (r) => {
        const out: Buffer[] = [];
        r.on("data", (c) => out.push(c));
        r.on("end", () => {
          if (seen.length === 1) {
            res.writeHead(503, { "Content-Type": "application/problem+json" });
            res.end('{"title":"Service Unavailable","status":503}');
          } else {
            res.writeHead(r.statusCode ?? 500, { "Content-Type": "application/json" });
            res.end(Buffer.concat(out));
          }
        });
      });
      fwd.end(Buffer.concat(chunks));
    });
  });
  await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
  try {
    const c = new Client({ baseUrl: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`, token: TOK.controller, backoffMs: 50 });
    const ref = uniq("T-retry");
    const got = await c.createSession({ goal: "retried create", ticket_ref: ref });
    assert.equal(seen.length, 2);
    assert.equal(seen[0], seen[1]);
    const listed = (await ctl.listSessions({ ticket_ref: ref })).sessions.map((x) => x.session_id);
    assert.deepEqual(listed, [got.session_id]);
  } finally {
    proxy.close();
  }
});

test("webhook: a real delivery verifies with the secret, tampering does not", { skip }, async () => {
  const got: { headers: Record<string, string>; body: Buffer }[] = [];
  const rcv = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      got.push({ headers: req.headers as Record<string, string>, body: Buffer.concat(chunks) });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((r) => rcv.listen(0, "127.0.0.1", r));
  const hook = await adm.createWebhook({ url: `http://127.0.0.1:${(rcv.address() as AddressInfo).port}/hook`, types: ["session.created"], description: "ts sdk test" });
  try {
    assert.match(hook.secret, /^whsec_/);
    const s = await newSession();
    const deadline = Date.now() + 30_000;
    let mine: (typeof got)[number] | undefined;
    while (!mine && Date.now() < deadline) {
      mine = got.find((d) => JSON.parse(d.body.toString()).session_id === s.session_id);
      if (!mine) await sleep(200);
    }
    assert.ok(mine, "no delivery within 30 s");
    const payload = verifyWebhook(hook.secret, mine.body, mine.headers);
    assert.equal(payload.type, "session.created");
    assert.equal(payload.event_id, mine.headers["webhook-id"]);
    assert.throws(() => verifyWebhook(hook.secret, Buffer.concat([mine!.body, Buffer.from(" ")]), mine!.headers), WebhookVerificationError);
    const other = await adm.createWebhook({ url: "http://127.0.0.1:9/unused" });
    await adm.deleteWebhook(other.id);
    assert.throws(() => verifyWebhook(other.secret, mine!.body, mine!.headers), WebhookVerificationError);
  } finally {
    await adm.deleteWebhook(hook.id);
    rcv.close();
  }
});

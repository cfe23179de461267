// Tests that need no TaskPilots server: webhook signatures and the retry policy.
import { mock, test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { APIError, Client, ConflictError, TransportError, ValidationError, WebhookVerificationError, parseRetryAfter, signWebhook, verifyWebhook } from "../src/index.js";

// Produced by the standardwebhooks npm package (Webhook.sign), an
// implementation independent of this one.
const V = {
  secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
  id: "evt_01",
  ts: 1764504000,
  body: '{"event_id":"evt_01","type":"session.created","session_id":"ses_01","seq":1,"state_version":1,"created_at":"2026-11-30T12:00:00Z","payload":{"goal":"x"}}',
  sig: "v1,bERyfkjZqVvGLsUyNubYkT4EWxkz4X1RGqLNQxb8cmQ=",
};
const hdrs = (sig = V.sig) => ({ "Webhook-Id": V.id, "Webhook-Timestamp": String(V.ts), "Webhook-Signature": sig });

test("webhook: sign matches the reference vector", () => {
  assert.equal(signWebhook(V.secret, V.id, V.ts, V.body), V.sig);
});

// The standardwebhooks package checks the timestamp against Date.now():
// the vector is verified at a mocked time shortly after it was signed.
function at<T>(unixSeconds: number, f: () => T): T {
  mock.timers.enable({ apis: ["Date"], now: unixSeconds * 1000 });
  try {
    return f();
  } finally {
    mock.timers.reset();
  }
}

test("webhook: verify accepts the vector, also among rotated signatures", () => {
  assert.equal(at(V.ts + 10, () => verifyWebhook(V.secret, V.body, hdrs())).event_id, "evt_01");
  assert.equal(at(V.ts, () => verifyWebhook(V.secret, Buffer.from(V.body), new Headers(hdrs("v1,AAAA " + V.sig)))).type, "session.created");
  assert.equal(at(V.ts, () => verifyWebhook(V.secret, new TextEncoder().encode(V.body), hdrs())).seq, 1);
});

test("webhook: verify rejects tampering, other secrets, old timestamps, missing headers", () => {
  const cases: [string, string, string, Record<string, string>, number][] = [
    ["tampered body", V.secret, V.body.replace("x", "y"), hdrs(), V.ts],
    ["other secret", "whsec_" + "QUJD".repeat(8), V.body, hdrs(), V.ts],
    ["old timestamp", V.secret, V.body, hdrs(), V.ts + 3600],
    ["no signature", V.secret, V.body, { "webhook-id": "evt_01", "webhook-timestamp": String(V.ts) }, V.ts],
  ];
  for (const [name, secret, body, h, now] of cases) {
    at(now, () => assert.throws(() => verifyWebhook(secret, body, h), WebhookVerificationError, name));
  }
});

async function scripted(script: [number, unknown][]): Promise<{ srv: Server; url: string; seen: (string | undefined)[] }> {
  const seen: (string | undefined)[] = [];
  const srv = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      seen.push(req.headers["idempotency-key"] as string | undefined);
      const [status, body] = script.shift() ?? [200, {}];
      res.writeHead(status, { "Content-Type": status >= 400 ? "application/problem+json" : "application/json", ...(status === 503 ? { "Retry-After": "0" } : {}) });
      res.end(JSON.stringify(body));
    });
  });
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  return { srv, url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}`, seen };
}

test("retry: 5xx retried with the call's idempotency key", async () => {
  const { srv, url, seen } = await scripted([[503, { status: 503 }], [502, {}], [201, { session_id: "ses_1" }]]);
  try {
    const c = new Client({ baseUrl: url, token: "t", backoffMs: 10, maxBackoffMs: 50 });
    const got = await c.createSession({ goal: "g" });
    assert.equal(got.session_id, "ses_1");
    assert.equal(seen.length, 3);
    assert.ok(seen[0]);
    assert.equal(new Set(seen).size, 1, "every retry must resend the call's key");
    await c.createSession({ goal: "g2" });
    assert.notEqual(seen[3], seen[0]);
  } finally {
    srv.close();
  }
});

test("retry: 4xx never retried, typed with the problem fields", async () => {
  for (const [status, cls] of [[409, ConflictError], [422, ValidationError], [429, APIError]] as const) {
    const { srv, url, seen } = await scripted([[status, { title: "no", status, detail: "d", current_version: 7, errors: [{ field: "queue", message: "required" }] }]]);
    try {
      const c = new Client({ baseUrl: url, token: "t", backoffMs: 10 });
      const err = await c.delegate("ses_1", { queue: "q", step: "s", expected_version: 1 }).then(() => undefined, (e) => e);
      assert.ok(err instanceof cls, `${status}: ${err}`);
      assert.equal(err.status, status);
      assert.equal(err.currentVersion, 7);
      assert.equal(err.field("queue"), "required");
      assert.equal(seen.length, 1);
    } finally {
      srv.close();
    }
  }
});

test("retry: a write without idempotency key is not retried (client.api, the openapi-fetch client)", async () => {
  const { srv, url, seen } = await scripted([[503, { status: 503 }]]);
  try {
    const c = new Client({ baseUrl: url, token: "t", backoffMs: 10 });
    const { error, response } = await c.api.POST("/sessions", { body: { goal: "g" } });
    assert.equal(response.status, 503);
    assert.deepEqual(error, { status: 503 });
    assert.deepEqual(seen, [undefined]);
  } finally {
    srv.close();
  }
});

test("retry: Retry-After sets the delay when longer than the backoff", () => {
  const c = new Client({ baseUrl: "http://x", token: "t", backoffMs: 100, maxBackoffMs: 5000 });
  assert.ok(c.delay(0) <= 100);
  assert.equal(c.delay(0, 2), 2000);
  assert.equal(c.delay(0, 3600), 20_000); // capped: a server cannot park the client for an hour
  assert.equal(parseRetryAfter("3"), 3);
  assert.equal(parseRetryAfter(null), undefined);
  assert.equal(parseRetryAfter("soon"), undefined);
  assert.equal(parseRetryAfter("Wed, 21 Oct 2015 07:28:00 GMT"), 0);
});

test("errors: a 503 after the retries is a ServerError with retryAfter", async () => {
  const { srv, url } = await scripted([[503, { title: "Service Unavailable", status: 503 }]]);
  try {
    const c = new Client({ baseUrl: url, token: "t", maxRetries: 0 });
    const err = await c.getSession("ses_1").then(() => undefined, (e) => e);
    assert.equal(err?.constructor?.name, "ServerError");
    assert.equal(err.retryAfter, 0);
    assert.equal(err.path, "/sessions/ses_1");
    assert.equal(err.method, "GET");
  } finally {
    srv.close();
  }
});

test("retry: webhook writes carry a key and are retried with it", async () => {
  const { srv, url, seen } = await scripted([[503, { status: 503 }], [201, { id: "whk_1", secret: "whsec_x" }]]);
  try {
    const c = new Client({ baseUrl: url, token: "t", backoffMs: 10, maxBackoffMs: 50 });
    const got = await c.createWebhook({ url: "http://example.invalid/hook" }, { idempotencyKey: "hook-1" });
    assert.equal(got.id, "whk_1");
    assert.deepEqual(seen, ["hook-1", "hook-1"]);
  } finally {
    srv.close();
  }
});

test("retry: connection errors are TransportError after the retries", async () => {
  const c = new Client({ baseUrl: "http://127.0.0.1:1", token: "t", maxRetries: 1, backoffMs: 10 });
  await assert.rejects(c.getSession("ses_1"), TransportError);
});

// Webhook signature verification per the Standard Webhooks specification:
// headers webhook-id, webhook-timestamp (Unix seconds) and webhook-signature
// ("v1,<base64 HMAC-SHA256 of id.timestamp.body>", space-separated when
// several secrets sign during a rotation), keyed by the base64 part of the
// whsec_ secret. node:crypto only, no dependency.
import { createHmac, timingSafeEqual } from "node:crypto";
import { TaskPilotsError } from "./errors.js";

/** How far the timestamp may be from now, either way (limits replays). */
export const DEFAULT_TOLERANCE_SECONDS = 5 * 60;

/** The delivery's headers, signature or timestamp do not verify. */
export class WebhookVerificationError extends TaskPilotsError {}

function key(secret: string): Buffer {
  const s = secret.startsWith("whsec_") ? secret.slice("whsec_".length) : secret;
  const k = Buffer.from(s, "base64");
  if (k.length === 0 || k.toString("base64").replace(/=+$/, "") !== s.replace(/=+$/, "")) {
    throw new WebhookVerificationError("webhook secret is not base64");
  }
  return k;
}

/** The webhook-signature value (v1,<base64>) of one message. */
export function signWebhook(secret: string, msgId: string, timestamp: number, body: string | Uint8Array): string {
  const mac = createHmac("sha256", key(secret));
  mac.update(`${msgId}.${Math.floor(timestamp)}.`);
  mac.update(body);
  return "v1," + mac.digest("base64");
}

type Headers_ = Headers | Record<string, string | string[] | undefined>;

function header(h: Headers_, name: string): string | undefined {
  if (typeof (h as Headers).get === "function") return (h as Headers).get(name) ?? undefined;
  for (const [k, v] of Object.entries(h)) {
    if (k.toLowerCase() === name) return Array.isArray(v) ? v[0] : v;
  }
  return undefined;
}

/**
 * Verify a delivery and return its decoded JSON payload.
 * `body` must be the raw body exactly as received. Throws WebhookVerificationError.
 */
export function verifyWebhook(
  secret: string,
  body: string | Uint8Array,
  headers: Headers_,
  opts: { toleranceSeconds?: number; now?: number } = {},
): any {
  const id = header(headers, "webhook-id");
  const ts = header(headers, "webhook-timestamp");
  const sigs = header(headers, "webhook-signature");
  if (!id || !ts || !sigs) throw new WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature header");
  const t = Number(ts);
  if (!/^\d+$/.test(ts) || !Number.isSafeInteger(t)) throw new WebhookVerificationError(`invalid webhook-timestamp ${ts}`);
  const now = opts.now ?? Date.now() / 1000;
  if (Math.abs(now - t) > (opts.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS)) {
    throw new WebhookVerificationError("webhook-timestamp outside the tolerance");
  }
  const expected = Buffer.from(signWebhook(secret, id, t, body).slice(3));
  for (const cand of sigs.split(" ")) {
    const [version, value] = [cand.slice(0, cand.indexOf(",")), cand.slice(cand.indexOf(",") + 1)];
    if (version !== "v1") continue;
    const got = Buffer.from(value);
    // Constant-time comparison: the signature cannot be guessed byte by byte.
    if (got.length === expected.length && timingSafeEqual(got, expected)) {
      return JSON.parse(typeof body === "string" ? body : Buffer.from(body).toString("utf8"));
    }
  }
  throw new WebhookVerificationError("no matching signature");
}

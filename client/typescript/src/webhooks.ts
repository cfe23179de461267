// Webhook signature verification per the Standard Webhooks specification,
// with the specification's own npm package (standardwebhooks): headers
// webhook-id, webhook-timestamp (Unix seconds, at most 5 minutes from now)
// and webhook-signature ("v1,<base64 HMAC-SHA256 of id.timestamp.body>",
// space-separated when several secrets sign during a rotation), keyed by the
// base64 part of the whsec_ secret. This module only adapts the inputs (a
// fetch Headers or a Node header object, a string or bytes body) and the
// error class.
import { Webhook, WebhookVerificationError as StandardWebhookVerificationError } from "standardwebhooks";
import { TaskPilotsError } from "./errors.js";

/** How far the timestamp may be from now, either way (the standardwebhooks package's fixed tolerance). */
export const DEFAULT_TOLERANCE_SECONDS = 5 * 60;

/** The delivery's headers, signature or timestamp do not verify; `cause` is the standardwebhooks error. */
export class WebhookVerificationError extends TaskPilotsError {}

type HeaderBag = Headers | Record<string, string | string[] | undefined>;

function header(h: HeaderBag, name: string): string {
  if (typeof (h as Headers).get === "function") return (h as Headers).get(name) ?? "";
  for (const [k, v] of Object.entries(h)) {
    if (k.toLowerCase() === name) return (Array.isArray(v) ? v[0] : v) ?? "";
  }
  return "";
}

function webhook(secret: string): Webhook {
  try {
    return new Webhook(secret);
  } catch (e) {
    throw new WebhookVerificationError(`webhook secret is not usable: ${(e as Error)?.message ?? e}`, { cause: e });
  }
}

const bytes = (body: string | Uint8Array) => (typeof body === "string" ? body : Buffer.from(body.buffer, body.byteOffset, body.byteLength));

/** The webhook-signature value (v1,<base64>) of one message. */
export function signWebhook(secret: string, msgId: string, timestamp: number, body: string | Uint8Array): string {
  return webhook(secret).sign(msgId, new Date(Math.floor(timestamp) * 1000), bytes(body));
}

/**
 * Verify a delivery and return its decoded JSON payload. `body` must be the
 * raw body exactly as received; `headers` a fetch Headers or a Node
 * IncomingHttpHeaders. Throws WebhookVerificationError.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function verifyWebhook(secret: string, body: string | Uint8Array, headers: HeaderBag): any {
  const h = {
    "webhook-id": header(headers, "webhook-id"),
    "webhook-timestamp": header(headers, "webhook-timestamp"),
    "webhook-signature": header(headers, "webhook-signature"),
  };
  const wh = webhook(secret);
  try {
    return wh.verify(bytes(body), h);
  } catch (e) {
    if (e instanceof StandardWebhookVerificationError || e instanceof SyntaxError) {
      throw new WebhookVerificationError(e.message || "webhook verification failed", { cause: e });
    }
    throw e;
  }
}

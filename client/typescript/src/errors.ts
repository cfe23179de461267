// Typed errors: every 4xx/5xx answer of the API is application/problem+json
// (RFC 9457); APIError carries its fields and the subclasses let callers
// branch (`if (e instanceof ConflictError) e.currentVersion`).
import type { components } from "./schema.js";

export type FieldError = components["schemas"]["FieldError"];

/** Base class of every error thrown by this package. */
export class TaskPilotsError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The request got no HTTP answer (connection refused, reset, timeout), after any retries. */
export class TransportError extends TaskPilotsError {}

/** An error answer of the API with the problem+json fields. */
export class APIError extends TaskPilotsError {
  /** Seconds the server asked to wait (Retry-After), if any. */
  retryAfter?: number;

  constructor(
    readonly method: string,
    readonly path: string,
    readonly status: number,
    readonly title: string,
    readonly detail: string,
    readonly type: string,
    /** Every offending field (may be empty). */
    readonly errors: FieldError[],
    /** The session's current version on a 409 (and illegal transitions). */
    readonly currentVersion: number | undefined,
    readonly body: unknown,
  ) {
    let msg = `${method} ${path}: ${status} ${title}`.trimEnd();
    if (detail) msg += `: ${detail}`;
    if (errors.length) msg += ` [${errors.map((e) => `${e.field}: ${e.message}`).join("; ")}]`;
    super(msg);
  }

  /** The message for field `name`, or undefined when it is not listed. */
  field(name: string): string | undefined {
    return this.errors.find((e) => e.field === name)?.message;
  }

  /** The names of the offending fields. */
  get fields(): string[] {
    return this.errors.map((e) => e.field);
  }
}

/** 400: malformed JSON or request. */
export class BadRequestError extends APIError {}
/** 401: missing or invalid token. */
export class AuthenticationError extends APIError {}
/** 403: the token's role may not call this operation. */
export class PermissionDeniedError extends APIError {}
/** 404: unknown id. */
export class NotFoundError extends APIError {}
/** 409: version or lease conflict; `currentVersion` is the session's version now. */
export class ConflictError extends APIError {}
/** 413: request body over the limit. */
export class PayloadTooLargeError extends APIError {}
/** 422: validation failure or illegal transition; `errors` lists every field. */
export class ValidationError extends APIError {}
/** 5xx: the server could not answer (retried first when the call is idempotent). */
export class ServerError extends APIError {}

const byStatus: Record<number, typeof APIError> = {
  400: BadRequestError,
  401: AuthenticationError,
  403: PermissionDeniedError,
  404: NotFoundError,
  409: ConflictError,
  413: PayloadTooLargeError,
  422: ValidationError,
};

/**
 * Build the typed error of an error answer from its body: the problem+json
 * document (as openapi-fetch parsed it), or text when it was not JSON.
 */
export function errorFromResponse(method: string, path: string, status: number, body: unknown): APIError {
  const Cls = byStatus[status] ?? (status >= 500 ? ServerError : APIError);
  if (typeof body === "string") {
    let doc: unknown;
    try {
      doc = body ? JSON.parse(body) : {};
    } catch {
      return new Cls(method, path, status, "", body.slice(0, 512), "", [], undefined, body);
    }
    body = doc;
  }
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    return new Cls(method, path, status, "", "", "", [], undefined, body);
  }
  const d = body as Record<string, unknown>;
  const errors: FieldError[] = Array.isArray(d.errors)
    ? d.errors.filter((e) => e && typeof e === "object").map((e) => ({ field: String(e.field ?? ""), message: String(e.message ?? "") }))
    : [];
  const cv = typeof d.current_version === "number" ? d.current_version : undefined;
  return new Cls(method, path, status, String(d.title ?? ""), String(d.detail ?? ""), String(d.type ?? ""), errors, cv, body);
}

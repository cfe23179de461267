// TaskPilots Handoff client: sessions, delegation, leases with heartbeats and
// fencing, the event feed, webhooks. Node >= 20.3; runtime dependencies:
// openapi-fetch (requests typed by the generated schema) and standardwebhooks.
export * from "./client.js";
export * from "./errors.js";
export * from "./webhooks.js";
export * from "./worker.js";
export type { components, paths, operations } from "./schema.js";

// A worker whose handler is shaped like an LLM call (no network).
//
//   TASKPILOTS_URL=http://localhost:8080 TASKPILOTS_WORKER_TOKEN=tpk_… \
//     node dist/examples/worker.js [queue] [maxLeases]
//
// The handler renders the context packet as a prompt (a real worker would
// send it to a model, caching the stable prefix), "answers" it and returns
// the result contract. The Worker heartbeats while it runs, submits the
// result with the lease's fencing token and stops on SIGTERM after the
// current lease.
import { Client, Worker, type LeaseContext, type ResultBody } from "../src/index.js";

const queue = process.argv[2] ?? "refunds";
const maxLeases = process.argv[3] ? Number(process.argv[3]) : undefined;
const tp = new Client({ baseUrl: process.env.TASKPILOTS_URL!, token: process.env.TASKPILOTS_WORKER_TOKEN! });

/** Stands in for a model call: a structured answer and token usage. */
async function fakeModel(prompt: string, signal: AbortSignal) {
  if (signal.aborted) throw new Error("lease lost");
  return { answer: { eligible: /refund/i.test(prompt) }, inputTokens: Math.floor(prompt.length / 4) };
}

let cachedPrefixHash = "";
async function handle(lease: LeaseContext): Promise<ResultBody> {
  const prompt = await tp.getPacketPrompt(lease.session_id);
  const cached = prompt.prefixHash === cachedPrefixHash ? prompt.prefixBytes : 0;
  cachedPrefixHash = prompt.prefixHash;
  const reply = await fakeModel(`${prompt.text}\nStep: ${lease.step}\n${lease.packet.instructions ?? ""}`, lease.signal);
  return {
    result_type: "completed",
    output: reply.answer,
    evidence: [{ claim: `model answer on packet v${lease.packet.based_on_version}`, source: "fake-model" }],
    uncertainty: { level: 0.2, notes: "no real model" },
    usage: { input_tokens: reply.inputTokens, cached_input_tokens: Math.min(Math.floor(cached / 4), reply.inputTokens) },
  };
}

const w = new Worker({
  client: tp, queue, handler: handle, waitSeconds: 5,
  onResult: (o) => console.log(JSON.stringify({ delegation: o.lease.delegation_id, answer: o.answer, error: o.error ? String(o.error) : null })),
});
await w.run({ maxLeases, handleSignals: true });

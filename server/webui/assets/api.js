// The OpenAI-style API of this server, called with relative URLs (the page may sit behind a
// proxy): model list and streaming chat completions (server-sent events).

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function headers(apiKey, json) {
  const h = {};
  if (json) h["Content-Type"] = "application/json";
  if (apiKey) h.Authorization = `Bearer ${apiKey}`;
  return h;
}

async function failure(res) {
  let message = res.statusText;
  try {
    const j = await res.json();
    if (j?.error?.message) message = j.error.message;
  } catch { /* not JSON */ }
  return new ApiError(res.status, `${res.status}: ${message}`);
}

export async function listModels(apiKey) {
  const res = await fetch("v1/models", { headers: headers(apiKey, false), cache: "no-store" });
  if (!res.ok) throw await failure(res);
  return ((await res.json()).data || []).map((m) => m.id);
}

// Streams one chat completion. onDelta(text) for every content delta; resolves to
// {usage, finish_reason, ttft_ms, tokens_per_s, deltas}: TTFT from sending the request to the
// first content delta, and decode tokens/s as (completion_tokens - 1) over the time from the
// first to the last delta, both measured here with performance.now().
export async function streamChat(body, { apiKey, signal, onDelta }) {
  const t0 = performance.now();
  const res = await fetch("v1/chat/completions", { method: "POST", headers: headers(apiKey, true), body: JSON.stringify(body), signal });
  if (!res.ok) throw await failure(res);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  const out = { usage: null, finish_reason: null, ttft_ms: NaN, tokens_per_s: NaN, deltas: 0 };
  let first = NaN, last = NaN, buffer = "", done = false;
  const onEvent = (data) => {
    if (data === "[DONE]") { done = true; return; }
    const chunk = JSON.parse(data);
    if (chunk.error) throw new ApiError(chunk.error.code || 500, chunk.error.message || "stream error");
    if (chunk.usage) out.usage = chunk.usage;
    const choice = (chunk.choices || [])[0];
    if (choice?.finish_reason) out.finish_reason = choice.finish_reason;
    const text = choice?.delta?.content;
    if (typeof text === "string" && text.length) {
      last = performance.now();
      if (Number.isNaN(first)) first = last;
      out.deltas += 1;
      onDelta(text);
    }
  };
  while (!done) {
    const { value, done: end } = await reader.read();
    if (end) break;
    buffer += value;
    let cut;
    while ((cut = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut).replace(/^\r?\n\r?\n/, "");
      const data = event.split(/\r?\n/).filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
      if (data) onEvent(data);  // lines starting with ':' are heartbeats
    }
  }
  out.ttft_ms = first - t0;
  const n = out.usage?.completion_tokens;
  if (n > 1 && last > first) out.tokens_per_s = (n - 1) / ((last - first) / 1000);
  return out;
}

// Client conformance (issue 46): the request shapes the official `openai` npm client, vLLM's
// benchmark client and agent frameworks send, against the real vlm-server; each must answer 200
// with the right response shape.
// Usage: node openai_conformance.mjs BASE_URL MODEL FORMAT [IMAGE_FILE]
//   FORMAT: "string" or "openai", the content format the server should have read off the model's
//   chat template (checked through /tokenize); IMAGE_FILE (a PNG): the model takes images, and
//   image parts are sent as data URLs (without it, an image part must be a 400 naming the part).
// Cases: text parts; system and developer parts; the tool round trip (a required call, then the
// assistant message with content null and the tool result, as a string and as parts, then the
// answer); max_completion_tokens; stream_options.include_usage; n > 1; logprobs with
// top_logprobs; response_format json_schema; vLLM's benchmark client's payload and stream reading;
// images as parts; /tokenize with the same messages.
// Prints one JSON summary line; exits 1 on the first failure.
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const [baseURL, model, format, imageFile] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120000 });
const fail = (msg) => {
  console.error(`FAIL: ${msg}`);
  process.exit(1);
};
const check = (cond, msg) => cond || fail(msg);
const show = (x) => JSON.stringify(x);

async function post(path, body) {
  const r = await fetch(`${baseURL}${path}`, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    signal: AbortSignal.timeout(120000),
  });
  return { status: r.status, body: await r.json() };
}
const tokenize = async (messages, what) => {
  const r = await post("/tokenize", { model, messages });
  check(r.status === 200 && r.body.count === r.body.tokens.length && r.body.count > 0, `${what}: /tokenize ${show(r)}`);
  return r.body.tokens;
};

// A whole chat completion: 200 (the client throws otherwise) and OpenAI's shape.
async function chat(what, params) {
  let r;
  try {
    r = await client.chat.completions.create({ model, temperature: 0, max_completion_tokens: 8, ...params });
  } catch (e) {
    fail(`${what}: ${e.status} ${e.message}`);
  }
  check(r.object === "chat.completion" && typeof r.id === "string" && r.model === model, `${what}: ${show(r)}`);
  const n = params.n ?? 1;
  check(r.choices.length === n, `${what}: ${r.choices.length} choices, wanted ${n}`);
  r.choices.forEach((c, i) => {
    check(c.index === i && c.message.role === "assistant", `${what}: choice ${i} ${show(c)}`);
    check(["stop", "length", "tool_calls"].includes(c.finish_reason), `${what}: finish ${c.finish_reason}`);
    check(typeof c.message.content === "string" || (c.message.content === null && c.message.tool_calls?.length),
      `${what}: content ${show(c.message)}`);
  });
  const u = r.usage;
  check(u.prompt_tokens > 0 && u.completion_tokens >= n && u.total_tokens === u.prompt_tokens + u.completion_tokens,
    `${what}: usage ${show(u)}`);
  return r;
}

const text = (t) => ({ type: "text", text: t });
const summary = {};

// ---- text parts; system and developer parts ---------------------------------------------------
const parted = [{ role: "user", content: [text("Name a color"), text("in one word.")] }];
const r1 = await chat("text parts", { messages: parted });
summary.text_parts = r1.choices[0].message.content;
// The content format: a string-format template gets the parts joined with "\n", an OpenAI-format
// one the parts (the Qwen2-VL fixture template writes them one after another).
const joined = format === "string" ? "Name a color\nin one word." : "Name a colorin one word.";
check(show(await tokenize(parted, "parts")) === show(await tokenize([{ role: "user", content: joined }], "joined")),
  `the parts did not render as the ${format} format renders them`);
const sysdev = [
  { role: "system", content: [text("You are terse.")] },
  { role: "developer", content: [text("Answer in English.")] },
  { role: "user", content: [text("Hi")] },
];
await chat("system and developer parts", { messages: sysdev });
await tokenize(sysdev, "system and developer parts");

// ---- the tool round trip ------------------------------------------------------------------------
const bias = {};
for (const t of ['"', "}", "]"])
  for (const id of (await post("/tokenize", { prompt: t, add_special_tokens: false })).body.tokens) bias[id] = 15;
const tools = [{
  type: "function",
  function: {
    name: "get_weather", description: "Current weather of a city",
    parameters: { type: "object", properties: { city: { enum: ["Paris", "Tokyo"] } }, required: ["city"],
      additionalProperties: false },
  },
}];
const ask = [{ role: "system", content: [text("You can call tools.")] }, { role: "user", content: [text("Weather in Paris?")] }];
const call = await chat("tool call", { messages: ask, tools, tool_choice: "required", max_completion_tokens: 200,
  logit_bias: bias });
const calls = call.choices[0].message.tool_calls;
check(call.choices[0].finish_reason === "tool_calls" && calls?.length >= 1, `tool call: ${show(call.choices[0])}`);
check(calls[0].type === "function" && calls[0].function.name === "get_weather" && typeof calls[0].id === "string",
  `tool call: ${show(calls[0])}`);
check(["Paris", "Tokyo"].includes(JSON.parse(calls[0].function.arguments).city), `arguments ${calls[0].function.arguments}`);
const called = { role: "assistant", content: null, tool_calls: calls };
const result = '{"temp": 18, "sky": "clear"}';
const asString = [...ask, called, { role: "tool", tool_call_id: calls[0].id, content: result }];
const asParts = [...ask, called, { role: "tool", tool_call_id: calls[0].id, content: [text(result)] }];
const answer = await chat("tool result", { messages: asString, tools });
check(typeof answer.choices[0].message.content === "string" || answer.choices[0].message.tool_calls, "answer");
await chat("tool result as parts", { messages: asParts, tools, stream: false });
// Tool results as parts render as the string does, in both formats (vLLM joins them).
check(show(await tokenize(asString, "tool string")) === show(await tokenize(asParts, "tool parts")),
  "a tool result as parts rendered unlike the same result as a string");
summary.tool_call = calls[0].function;

// ---- max_completion_tokens, n, logprobs, response_format ---------------------------------------
const hi = [{ role: "user", content: "Say something." }];
const capped = await chat("max_completion_tokens", { messages: hi, max_completion_tokens: 3, min_tokens: 3 });
check(capped.usage.completion_tokens === 3 && capped.choices[0].finish_reason === "length",
  `max_completion_tokens: ${show(capped.usage)} ${capped.choices[0].finish_reason}`);
const several = await chat("n", { messages: hi, n: 3, temperature: 1, seed: 7, max_completion_tokens: 4 });
check(several.usage.completion_tokens <= 12, `n: usage ${show(several.usage)}`);
const lp = await chat("logprobs", { messages: hi, logprobs: true, top_logprobs: 2, max_completion_tokens: 4 });
const entries = lp.choices[0].logprobs?.content;
check(Array.isArray(entries) && entries.length === lp.usage.completion_tokens, `logprobs: ${show(lp.choices[0].logprobs)}`);
for (const e of entries)
  check(typeof e.token === "string" && e.logprob <= 0 && Array.isArray(e.bytes) && e.top_logprobs.length === 2 &&
    e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob, `logprob entry ${show(e)}`);
const schema = { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"], additionalProperties: false };
const rf = await chat("response_format", { messages: hi, max_completion_tokens: 60, logit_bias: bias,
  response_format: { type: "json_schema", json_schema: { name: "answer", schema } } });
check(rf.choices[0].finish_reason === "stop" && typeof JSON.parse(rf.choices[0].message.content).ok === "boolean",
  `response_format: ${show(rf.choices[0])}`);

// ---- streaming with stream_options.include_usage ------------------------------------------------
const stream = await client.chat.completions.create({ model, messages: parted, max_completion_tokens: 6, temperature: 0,
  stream: true, stream_options: { include_usage: true } });
let streamed = "", usage = null, finish = null, afterUsage = 0;
for await (const chunk of stream) {
  check(chunk.object === "chat.completion.chunk", `chunk ${show(chunk)}`);
  if (usage) afterUsage++;
  if (chunk.usage) {
    usage = chunk.usage;
    check(chunk.choices.length === 0, `the usage chunk has choices: ${show(chunk)}`);
  }
  for (const c of chunk.choices) {
    streamed += c.delta?.content ?? "";
    if (c.finish_reason) finish = c.finish_reason;
  }
}
check(usage && afterUsage === 0 && usage.total_tokens === usage.prompt_tokens + usage.completion_tokens,
  `stream usage ${show(usage)}`);
check(streamed === r1.choices[0].message.content.slice(0, streamed.length) && finish, `stream ${show(streamed)} ${finish}`);

// ---- vLLM's benchmark client (`--backend openai-chat`): its payload and its reading of the stream
// (lines stripped, ":" comments skipped, "data: " removed, JSON until [DONE]; the usage chunk gives
// the output length) --------------------------------------------------------------------------
{
  const res = await fetch(`${baseURL}/v1/chat/completions`, {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: [text("Tell me a story.")] }], temperature: 0.0,
      max_completion_tokens: 12, stream: true, stream_options: { include_usage: true }, ignore_eos: true }),
    signal: AbortSignal.timeout(120000),
  });
  check(res.status === 200, `benchmark payload: ${res.status}`);
  let firstContent = false, outputTokens = null, done = false;
  for (const line of (await res.text()).split("\n")) {
    const l = line.trim();
    if (!l || l.startsWith(":")) continue;
    const chunk = l.replace(/^data: /, "");
    if (chunk === "[DONE]") {
      done = true;
      continue;
    }
    const data = JSON.parse(chunk);
    if (data.choices?.length) firstContent ||= data.choices[0].delta.content !== undefined;
    else if (data.usage) outputTokens = data.usage.completion_tokens;
  }
  check(firstContent && done && outputTokens === 12, `benchmark stream: content ${firstContent}, done ${done}, tokens ${outputTokens}`);
}

// ---- images as parts --------------------------------------------------------------------------
const look = (url) => [{ role: "user", content: [text("What is in the picture?"), { type: "image_url", image_url: { url } }] }];
if (imageFile) {
  const url = `data:image/png;base64,${readFileSync(imageFile).toString("base64")}`;
  const img = await chat("image part", { messages: look(url) });
  const plain = await chat("no image", { messages: [{ role: "user", content: [text("What is in the picture?")] }] });
  check(img.usage.prompt_tokens > plain.usage.prompt_tokens + 1, `image tokens: ${img.usage.prompt_tokens} vs ${plain.usage.prompt_tokens}`);
  const withTools = await chat("image with system parts", { messages: [{ role: "system", content: [text("Be brief.")] }, ...look(url)] });
  summary.image_prompt_tokens = img.usage.prompt_tokens;
  summary.image_with_system = withTools.usage.prompt_tokens;
} else {
  const r = await post("/v1/chat/completions", { model, messages: look("data:image/png;base64,AAAA") });
  check(r.status === 400 && r.body.error.param === "messages[0].content[1].image_url", `image on a text model: ${show(r)}`);
}

// ---- bad shapes: 400s naming the field ----------------------------------------------------------
for (const [messages, param] of [
  [[{ role: "user", content: 5 }], "messages[0].content"],
  [[{ role: "user", content: [{ type: "audio_url", audio_url: { url: "x" } }] }], "messages[0].content[0].type"],
  [[{ role: "assistant", content: null, tool_calls: [{ type: "function", function: { arguments: "{}" } }] }],
    "messages[0].tool_calls[0].function.name"],
]) {
  const r = await post("/v1/chat/completions", { model, messages });
  check(r.status === 400 && r.body.error.param === param && r.body.error.type === "invalid_request_error",
    `bad ${show(messages)}: ${show(r)}`);
}

console.log(JSON.stringify({ ok: true, format, ...summary }));

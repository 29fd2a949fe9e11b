// Structured outputs against the real vlm-server with a random-weight model: the constraint, not
// the model, makes every output valid. Usage: node structured_outputs.mjs BASE_URL MODEL.
//  1. Every schema of json-schema-test-suite (draft4) that uses only supported keywords is sent
//     as response_format json_schema; each reply must validate with ajv (100 %). Schemas the
//     server still refuses must be refused with a 400 naming a keyword.
//  2. structured_outputs regex / choice / grammar (chat and completions) match; json_object parses.
//  3. An unsupported keyword is a 400 naming it.
//  4. Tools through the official openai client: a named call (whole and streamed) and
//     tool_choice "required" give tool_calls whose arguments validate against the parameters
//     schema; tool_choice "auto" parses a <tool_call> the model wrote into tool_calls.
// Prints one JSON summary line; exits 1 on failure.
import { readFileSync, readdirSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import OpenAI from "openai";

const require = createRequire(import.meta.url);
const Ajv = require("ajv");
const here = dirname(fileURLToPath(import.meta.url));
const [baseURL, model] = process.argv.slice(2);
const fail = (msg) => {
  console.error(`FAIL: ${msg}`);
  process.exit(1);
};
const check = (cond, msg) => cond || fail(msg);

async function post(path, body) {
  const r = await fetch(`${baseURL}${path}`, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    signal: AbortSignal.timeout(120000),
  });
  return { status: r.status, body: await r.json() };
}

// Ending tokens favoured a little (a random model would rarely close a string or an array on
// its own); the mask still decides what is allowed.
const ids = async (text) => (await post("/tokenize", { prompt: text, add_special_tokens: false })).body.tokens;
const bias = {};
for (const t of ['"', "}", "]"]) for (const id of await ids(t)) bias[id] = 15;
const messages = [{ role: "user", content: "Reply in JSON." }];

// ---- 1. json-schema-test-suite -------------------------------------------------------------
const supported = new Set(["type", "enum", "const", "properties", "required", "additionalProperties", "items",
  "minItems", "maxItems", "anyOf", "$ref", "minLength", "maxLength", "pattern", "format", "title", "description",
  "default", "examples", "$schema", "$id", "id", "$comment", "definitions", "$defs"]);
const childSchemas = (k, v) => {
  if (["properties", "definitions", "$defs"].includes(k) && v && typeof v === "object") return Object.values(v);
  if (["items", "additionalProperties"].includes(k)) return Array.isArray(v) ? v : [v];
  if (k === "anyOf" && Array.isArray(v)) return v;
  return [];
};
const usesOnlySupported = (s) => {
  if (typeof s !== "object" || s === null || Array.isArray(s)) return true;
  return Object.entries(s).every(([k, v]) => supported.has(k) && childSchemas(k, v).every(usesOnlySupported));
};
const suiteDir = join(here, "..", "node_modules", "json-schema-test-suite", "tests", "draft4");
const ajv = new Ajv({ strict: false, allErrors: true });
let tried = 0, valid = 0, refused = 0;
const refusedKeywords = {};
for (const file of readdirSync(suiteDir).filter((f) => f.endsWith(".json")).sort()) {
  for (const group of JSON.parse(readFileSync(join(suiteDir, file), "utf8"))) {
    const schema = group.schema;
    if (!usesOnlySupported(schema)) continue;
    if (JSON.stringify(schema).includes("http")) continue;  // remote references
    const r = await post("/v1/chat/completions", {
      model, messages, max_tokens: 200, temperature: 1, seed: tried, logit_bias: bias,
      response_format: { type: "json_schema", json_schema: { name: "t", schema } },
    });
    tried++;
    if (r.status === 400) {
      const m = r.body.error.message;
      check(/keyword '([^']+)'|satisfies|false/.test(m) && r.body.error.param === "response_format",
        `${file} "${group.description}": a 400 that names no keyword: ${m}`);
      const kw = (m.match(/keyword '([^']+)'/) || [, "unsatisfiable"])[1];
      refusedKeywords[kw] = (refusedKeywords[kw] || 0) + 1;
      refused++;
      continue;
    }
    check(r.status === 200, `${file}: status ${r.status} ${JSON.stringify(r.body)}`);
    const choice = r.body.choices[0];
    const text = choice.message.content;
    check(choice.finish_reason === "stop", `${file} "${group.description}": finish ${choice.finish_reason}: ${text}`);
    let value;
    try {
      value = JSON.parse(text);
    } catch {
      fail(`${file} "${group.description}": not JSON: ${text}`);
    }
    const { $schema, ...plain } = schema;  // draft-04 meta: the supported keywords mean the same in ajv's draft-07
    check(ajv.validate(plain, value), `${file} "${group.description}": ${text} fails ${JSON.stringify(schema)}: ${ajv.errorsText()}`);
    valid++;
  }
}
check(valid >= 20, `only ${valid} suite schemas were served`);

// ---- 2. regex, choice, grammar, json_object --------------------------------------------------
const so = async (path, extra) => {
  const body = path === "/v1/completions" ? { model, prompt: "Answer:", max_tokens: 60, temperature: 1, seed: 3, ...extra }
    : { model, messages, max_tokens: 60, temperature: 1, seed: 3, ...extra };
  const r = await post(path, body);
  check(r.status === 200, `${JSON.stringify(extra)}: ${r.status} ${JSON.stringify(r.body)}`);
  const c = r.body.choices[0];
  check(c.finish_reason === "stop", `${JSON.stringify(extra)}: finish ${c.finish_reason}`);
  return path === "/v1/completions" ? c.text : c.message.content;
};
const re = "[a-c]{2,5}-\\d{3}(x|yz)?";
for (const path of ["/v1/chat/completions", "/v1/completions"]) {
  const t = await so(path, { structured_outputs: { regex: re } });
  check(new RegExp(`^(?:${re})$`).test(t), `regex output ${JSON.stringify(t)}`);
  const c = await so(path, { structured_outputs: { choice: ["red", "green", "dark blue"] } });
  check(["red", "green", "dark blue"].includes(c), `choice output ${JSON.stringify(c)}`);
}
const g = await so("/v1/chat/completions", {
  structured_outputs: { grammar: 'root ::= "(" item ("," item){0,3} ")"\nitem ::= [0-9] | "x" [a-z]' },
});
check(/^\(([0-9]|x[a-z])(,([0-9]|x[a-z])){0,3}\)$/.test(g), `grammar output ${JSON.stringify(g)}`);
const jo = await so("/v1/chat/completions", { response_format: { type: "json_object" }, logit_bias: bias, max_tokens: 200 });
const parsed = JSON.parse(jo);
check(typeof parsed === "object" && !Array.isArray(parsed) && parsed !== null, `json_object output ${jo}`);

// ---- 3. refusals -----------------------------------------------------------------------------
const bad = await post("/v1/chat/completions", {
  model, messages, response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "integer", minimum: 3 } } },
});
check(bad.status === 400 && bad.body.error.message.includes("'minimum'"), `minimum: ${JSON.stringify(bad.body)}`);
const badRe = await post("/v1/completions", { model, prompt: "a", structured_outputs: { regex: "(a)\\1" } });
check(badRe.status === 400 && badRe.body.error.param === "structured_outputs.regex", `backreference: ${JSON.stringify(badRe.body)}`);
const two = await post("/v1/chat/completions", { model, messages, structured_outputs: { regex: "a", choice: ["b"] } });
check(two.status === 400, `two kinds: ${two.status}`);

// ---- 4. tools through the openai client ------------------------------------------------------
const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120000 });
const weather = { type: "object", properties: { city: { type: "string", maxLength: 12 }, unit: { enum: ["c", "f"] } },
  required: ["city", "unit"] };
const clock = { type: "object", properties: { tz: { type: "string", pattern: "^[A-Z]{3}$" } }, required: ["tz"] };
const tools = [
  { type: "function", function: { name: "get_weather", description: "Weather of a city", parameters: weather } },
  { type: "function", function: { name: "get_time", description: "Time in a zone", parameters: clock } },
];
const schemaOf = { get_weather: weather, get_time: clock };
const tmsgs = [{ role: "user", content: "What is the weather in Paris?" }];
const base = { model, messages: tmsgs, tools, max_tokens: 200, temperature: 0, logit_bias: bias };
const checkCalls = (calls, what) => {
  check(Array.isArray(calls) && calls.length >= 1, `${what}: no tool_calls`);
  for (const c of calls) {
    check(c.type === "function" && typeof c.id === "string" && schemaOf[c.function.name], `${what}: call ${JSON.stringify(c)}`);
    check(ajv.validate(schemaOf[c.function.name], JSON.parse(c.function.arguments)),
      `${what}: arguments ${c.function.arguments}: ${ajv.errorsText()}`);
  }
};
async function streamed(params) {
  const stream = await client.chat.completions.create({ ...params, stream: true });
  const calls = [];
  let finish = null, content = "";
  for await (const chunk of stream) {
    for (const ch of chunk.choices) {
      if (ch.delta?.content) content += ch.delta.content;
      for (const d of ch.delta?.tool_calls ?? []) {
        calls[d.index] ??= { id: "", type: "function", function: { name: "", arguments: "" } };
        if (d.id) calls[d.index].id = d.id;
        if (d.function?.name) calls[d.index].function.name += d.function.name;
        if (d.function?.arguments) calls[d.index].function.arguments += d.function.arguments;
      }
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  return { calls, finish, content };
}
const named = { ...base, tool_choice: { type: "function", function: { name: "get_weather" } } };
const nw = await client.chat.completions.create(named);
checkCalls(nw.choices[0].message.tool_calls, "named");
check(nw.choices[0].message.tool_calls[0].function.name === "get_weather", "named: wrong function");
check(nw.choices[0].finish_reason === "stop", `named finish ${nw.choices[0].finish_reason}`);
const ns = await streamed(named);
checkCalls(ns.calls, "named, streamed");
check(ns.calls[0].function.arguments === nw.choices[0].message.tool_calls[0].function.arguments,
  `named: streamed ${ns.calls[0].function.arguments} vs ${nw.choices[0].message.tool_calls[0].function.arguments}`);
const required = { ...base, tool_choice: "required" };
const rw = await client.chat.completions.create(required);
checkCalls(rw.choices[0].message.tool_calls, "required");
check(rw.choices[0].finish_reason === "tool_calls", `required finish ${rw.choices[0].finish_reason}`);
const rs = await streamed(required);
checkCalls(rs.calls, "required, streamed");
check(rs.finish === "tool_calls", `required streamed finish ${rs.finish}`);
// auto: the model's own text is parsed (the regex only makes this random model write a call).
const call = '<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>';
const auto = { ...base, tool_choice: "auto", structured_outputs: { regex: "Sure\\. " + call.replace(/[.*+?^${}()|[\]\\]/g, "\\$&") } };
const aw = await client.chat.completions.create(auto);
checkCalls(aw.choices[0].message.tool_calls, "auto");
check(aw.choices[0].message.content === "Sure.", `auto content ${JSON.stringify(aw.choices[0].message.content)}`);
check(aw.choices[0].finish_reason === "tool_calls", `auto finish ${aw.choices[0].finish_reason}`);
const as = await streamed(auto);
checkCalls(as.calls, "auto, streamed");
check(as.content.trim() === "Sure." && as.finish === "tool_calls", `auto streamed ${JSON.stringify(as)}`);
check(!as.content.includes("<tool_call"), "auto streamed leaked the call into content");

console.log(JSON.stringify({ ok: true, suite_schemas_tried: tried, suite_outputs_valid: valid, suite_refused: refused,
  refused_keywords: refusedKeywords, named: nw.choices[0].message.tool_calls[0].function.arguments }));

// Drives vlm-server with the official `openai` npm client (tests/node_modules/openai, fetched by
// scripts/fetch_test_data.sh): models, chat (whole and streaming), completions, and an error.
// Usage: node openai_client.mjs BASE_URL MODEL. Prints one JSON summary line; exits 1 on failure.
import OpenAI from "openai";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60000 });
const fail = (msg) => {
  console.error(`FAIL: ${msg}`);
  process.exit(1);
};
const check = (cond, msg) => cond || fail(msg);

const models = await client.models.list();
check(models.data.length === 1 && models.data[0].id === model, `models: ${JSON.stringify(models.data)}`);

const messages = [{ role: "system", content: "Be brief." }, { role: "user", content: "Name a color." }];
const whole = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0 });
check(whole.object === "chat.completion", "chat object");
check(typeof whole.choices[0].message.content === "string", "chat content");
check(whole.usage.completion_tokens >= 1 && whole.usage.completion_tokens <= 8, "chat usage");

const stream = await client.chat.completions.create({
  model, messages, max_tokens: 8, temperature: 0, stream: true, stream_options: { include_usage: true },
});
let text = "", chunks = 0, usage = null, finish = null;
for await (const chunk of stream) {
  chunks++;
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) {
    if (c.delta?.content) text += c.delta.content;
    if (c.finish_reason) finish = c.finish_reason;
  }
}
check(usage && usage.completion_tokens === whole.usage.completion_tokens, `stream usage ${JSON.stringify(usage)}`);
check(text === whole.choices[0].message.content, `stream text ${JSON.stringify(text)} vs ${JSON.stringify(whole.choices[0].message.content)}`);
check(finish === whole.choices[0].finish_reason, "stream finish reason");

const comp = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 5, temperature: 0 });
check(comp.object === "text_completion" && typeof comp.choices[0].text === "string", "completion");
check(comp.usage.completion_tokens <= 5, "completion usage");

let status = 0;
try {
  await client.chat.completions.create({ model, messages, temperature: -1 });
} catch (e) {
  status = e.status;
}
check(status === 400, `bad temperature gave ${status}`);

console.log(JSON.stringify({ ok: true, chunks, text, completion: comp.choices[0].text }));

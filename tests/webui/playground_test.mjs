#!/usr/bin/env node
// End-to-end test of the web playground (server/webui) in Debian's headless chromium, driven by
// playwright-core (tests/node_modules, pinned by scripts/fetch_test_data.sh), against a real
// vlm-server on 127.0.0.1 serving the tiny Qwen2-VL chat fixture (random weights, the real Qwen
// tokenizer): the image-capable counterpart of the demo model, so that attached images and video
// frames go through the real media path. The server is started with --api-key and stopped by pid.
//   1. GET / answers the page with its security headers; every request the page makes stays on
//      this server (checked at the end), and no script error or CSP violation is reported.
//   2. Without the key the page says so; with the key typed in, it lists the model.
//   3. A text message with an image (file picker) streams an answer: the request holds the image
//      as a data: URL and the Bearer key; the answer arrives in several deltas, its text equals
//      the deltas' concatenation, and the usage line shows the server's usage figures.
//   4. LOOK-M and SinkRouter switched on, a video (made in the browser with MediaRecorder and
//      dropped on the page) is cut into frames: the request carries vlm_options and the frame
//      list, and the answer shows usage.vlm as bars with the server's figures.
//   5. An image pasted into the message box goes with the next message. Model output with HTML
//      in it (<img src=x onerror=...>, <script>) is shown as text. The tiny random-weight model
//      cannot be made to write that, so this one answer is replaced in the browser
//      (playwright's page.route fulfils the POST with a hand-written SSE stream): what is tested
//      is the page's rendering of whatever a model writes, not the server.
//   6. After a reload the conversation comes back from localStorage, still as text.
// Exit 0: passed; 1: a check failed; 77: skipped, only when no chromium is installed.
//   node tests/webui/playground_test.mjs --bin-dir build/bin [--screenshots docs]
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const FIXTURES = path.join(ROOT, "tests/fixtures");
const args = Object.fromEntries(process.argv.slice(2).reduce((a, v, i, all) => (v.startsWith("--") ? [...a, [v.slice(2), all[i + 1]]] : a), []));
const binDir = path.resolve(args["bin-dir"] || path.join(ROOT, "build/bin"));
const log = (msg) => console.log(`[playground_test ${new Date().toISOString().slice(11, 19)}] ${msg}`);

const chromiumPath = [process.env.VLM_CHROMIUM, "/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => p && fs.existsSync(p));
if (!chromiumPath) {
  console.log("SKIP: chromium is not installed (scripts/setup.sh installs Debian's chromium package)");
  process.exit(77);
}
let chromium;
try {
  ({ chromium } = await import("playwright-core"));
} catch (e) {
  console.error(`FAIL: cannot import playwright-core (run scripts/fetch_test_data.sh): ${e.message}`);
  process.exit(1);
}

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
  log(`ok: ${what}`);
}

// The fixture model with the Qwen3 tokenizer from tests/data, as tests/support builds it.
function modelDir(tmp) {
  const dir = path.join(tmp, "model");
  fs.mkdirSync(dir);
  const src = path.join(FIXTURES, "qwen2vl_server/qwen2_vl_chat");
  for (const f of fs.readdirSync(src)) fs.copyFileSync(path.join(src, f), path.join(dir, f));
  const tok = path.join(ROOT, "tests/data/tokenizers/qwen3");
  for (const f of ["tokenizer.json", "tokenizer_config.json"]) fs.copyFileSync(path.join(tok, f), path.join(dir, f));
  // The fixture has 2 layers, both dense under SinkRouter's default (num_dense_layers 2): route
  // the second one, with a threshold (-0.2) at which it skips some of its groups (2 of 5 here),
  // so that the switch has figures to show.
  fs.writeFileSync(path.join(dir, "sink_router.json"), JSON.stringify({ num_dense_layers: 1, coefficients: [-0.2] }));
  return dir;
}

// vlm-server on 127.0.0.1, an ephemeral port read from its "ready: http://HOST:PORT" line.
function startServer(model, apiKey) {
  const proc = spawn(path.join(binDir, "vlm-server"), ["--model", model, "--served-model-name", "qwen2-vl-tiny",
    "--api-key", apiKey, "--sink-router-config", path.join(model, "sink_router.json"), "--kv-cache-dtype", "f32", "--num-kv-blocks", "256", "--max-model-len", "4096", "--threads", "2",
    "--log-level", "warn", "--host", "127.0.0.1", "--port", "0"], { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  const ready = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`vlm-server not ready after 120 s:\n${stderr}`)), 120_000);
    proc.stderr.on("data", (d) => {
      stderr += d;
      const m = /ready: http:\/\/127\.0\.0\.1:(\d+)/.exec(stderr);
      if (m) { clearTimeout(timer); resolve(`http://127.0.0.1:${m[1]}`); }
    });
    proc.on("exit", (code) => { clearTimeout(timer); reject(new Error(`vlm-server exited (${code}):\n${stderr}`)); });
  });
  return { proc, ready, log: () => stderr };
}

async function stopServer(proc) {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = new Promise((resolve) => proc.once("exit", resolve));
  process.kill(proc.pid, "SIGTERM");
  const timer = setTimeout(() => { if (proc.exitCode === null) process.kill(proc.pid, "SIGKILL"); }, 30_000);
  await exited;
  clearTimeout(timer);
}

// The content deltas and the usage of an SSE body.
function parseSse(body) {
  const deltas = [];
  let usage = null;
  for (const line of body.split("\n")) {
    if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
    const j = JSON.parse(line.slice(6));
    if (j.usage) usage = j.usage;
    const t = j.choices?.[0]?.delta?.content;
    if (t) deltas.push(t);
  }
  return { deltas, usage };
}

const KEY = "playground-test-key";
const problems = [];
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "vlm_playground_"));
const server = startServer(modelDir(tmp), KEY);
let browser = null;
let failed = false;
try {
  const base = await server.ready;
  log(`server at ${base}`);
  browser = await chromium.launch({
    executablePath: chromiumPath, headless: true, chromiumSandbox: false, timeout: 60_000,
    args: ["--headless", "--no-sandbox", "--disable-gpu",
      // Off the internet: no name but 127.0.0.1 resolves, no proxy, none of Chromium's own traffic.
      "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--no-proxy-server",
      "--disable-background-networking", "--disable-component-update", "--disable-domain-reliability",
      "--disable-sync", "--disable-breakpad", "--no-first-run", "--no-default-browser-check", "--metrics-recording-only"],
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  page.setDefaultTimeout(120_000);
  const requests = [];
  page.on("request", (r) => requests.push(r.url()));
  // A script error fails the test at once: closing the page ends every wait on it.
  page.on("pageerror", (e) => { problems.push(`page error: ${e.message}`); page.close().catch(() => {}); });
  page.on("console", (m) => { if (m.type() === "error") problems.push(`console: ${m.text()}`); });

  // 1-2. The page, its headers; the key.
  const home = await page.goto(`${base}/`);
  const h = home.headers();
  check(home.status() === 200 && h["content-type"].startsWith("text/html"), "GET / answers the page (200, text/html)");
  check(/default-src 'none'/.test(h["content-security-policy"]) && /script-src 'self'/.test(h["content-security-policy"]) &&
        /require-trusted-types-for 'script'/.test(h["content-security-policy"]) && /frame-ancestors 'none'/.test(h["content-security-policy"]),
        `a strict Content-Security-Policy: ${h["content-security-policy"]}`);
  check(h["x-content-type-options"] === "nosniff" && h["x-frame-options"] === "DENY" && h["referrer-policy"] === "no-referrer",
        "nosniff, X-Frame-Options DENY, Referrer-Policy no-referrer");
  await page.waitForFunction(() => /API key/.test(document.getElementById("status").textContent));
  check(true, "without the key the page asks for it");
  problems.splice(0, problems.length, ...problems.filter((p) => !/401/.test(p)));  // that 401 was expected
  await page.fill("#api-key", KEY);
  await page.dispatchEvent("#api-key", "change");
  await page.waitForFunction(() => document.getElementById("model").value === "qwen2-vl-tiny");
  check(true, "with the key the model list shows qwen2-vl-tiny");

  // 3. Text and an image (file picker); streamed answer and usage line.
  await page.fill("#temperature", "0");
  await page.fill("#max-tokens", "6");
  await page.check("#ignore-eos");
  await page.fill("#prompt", "What is in this picture?");
  await page.setInputFiles("#file", path.join(FIXTURES, "qwen2vl_server/media/wide.png"));
  await page.waitForSelector("#attachments li");
  const [req1] = await Promise.all([
    page.waitForRequest((r) => r.url().endsWith("/v1/chat/completions")),
    page.click("#send"),
  ]);
  const body1 = req1.postDataJSON();
  const parts1 = body1.messages.at(-1).content;
  check(body1.stream === true && body1.stream_options?.include_usage === true && body1.model === "qwen2-vl-tiny",
        "the request streams, asks for usage and names the model");
  check(parts1[0].type === "image_url" && parts1[0].image_url.url.startsWith("data:image/png;base64,") &&
        parts1[1].type === "text" && parts1[1].text === "What is in this picture?", "the message holds the image as a data: URL and the text");
  check(req1.headers().authorization === `Bearer ${KEY}`, "the request carries the API key");
  check(body1.temperature === 0 && body1.max_tokens === 6 && body1.ignore_eos === true && !("vlm_options" in body1),
        "sampling settings sent; no vlm_options while the methods are at the server default");
  const sse1 = parseSse((await (await req1.response()).body()).toString("utf8"));
  const answer1 = page.locator("#messages .msg.assistant").nth(0);
  await answer1.locator(".usage").waitFor();
  check(sse1.deltas.length >= 2 && Number(await answer1.getAttribute("data-deltas")) === sse1.deltas.length,
        `the answer streamed in ${sse1.deltas.length} deltas`);
  const shown1 = await answer1.locator(".text").textContent();
  check(shown1 === sse1.deltas.join(""), `the shown answer is the streamed text: ${JSON.stringify(shown1)} vs ${JSON.stringify(sse1.deltas)}`);
  const usage1 = await answer1.locator(".usage").textContent();
  check(usage1.includes(`prompt ${sse1.usage.prompt_tokens} tokens`) && usage1.includes("completion 6 tokens") &&
        /TTFT \d+ ms/.test(usage1) && /decode [\d.]+ tokens\/s/.test(usage1), `usage line: ${usage1}`);

  // 4. Method switches on, a video dropped on the page.
  await page.selectOption("#look-m", "text-prior-pivot");
  await page.selectOption("#sink-router", "on");
  const webm = await page.evaluate(async () => {
    const canvas = document.createElement("canvas");
    canvas.width = 64;
    canvas.height = 48;
    const ctx = canvas.getContext("2d");
    const rec = new MediaRecorder(canvas.captureStream(10), { mimeType: "video/webm" });
    const chunks = [];
    rec.ondataavailable = (e) => chunks.push(e.data);
    const stopped = new Promise((resolve) => { rec.onstop = resolve; });
    rec.start();
    for (let i = 0; i < 15; ++i) {
      ctx.fillStyle = `hsl(${i * 24}, 70%, 50%)`;
      ctx.fillRect(0, 0, 64, 48);
      await new Promise((r) => setTimeout(r, 100));
    }
    rec.stop();
    await stopped;
    const bytes = new Uint8Array(await new Blob(chunks, { type: "video/webm" }).arrayBuffer());
    return Array.from(bytes);
  });
  await page.evaluate((bytes) => {
    const dt = new DataTransfer();
    dt.items.add(new File([new Uint8Array(bytes)], "colours.webm", { type: "video/webm" }));
    document.dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true }));
  }, webm);
  await page.waitForSelector("#attachments li figcaption >> text=/video, \\d+ frames/");
  await page.fill("#prompt", "And this clip?");
  const [req2] = await Promise.all([
    page.waitForRequest((r) => r.url().endsWith("/v1/chat/completions")),
    page.press("#prompt", "Enter"),
  ]);
  const body2 = req2.postDataJSON();
  check(body2.vlm_options?.look_m === "text-prior-pivot" && body2.vlm_options?.sink_router === true && !("sparse_prefill" in body2.vlm_options),
        `the switches are in the request: ${JSON.stringify(body2.vlm_options)}`);
  const video = body2.messages.at(-1).content[0];
  check(video.type === "video_url" && video.video_url.url.length >= 1 && video.video_url.url.every((u) => u.startsWith("data:image/jpeg;base64,")) &&
        video.video_url.fps > 0, `the dropped video went as ${video.video_url.url.length} frames at ${video.video_url.fps} fps`);
  check(body2.messages.length === 3 && body2.messages[1].role === "assistant", "the history goes with it");
  const resp2 = await req2.response();
  const sse2 = parseSse((await resp2.body()).toString("utf8"));
  check(resp2.status() === 200 && sse2.usage?.vlm, `the server answered with usage.vlm ${JSON.stringify(sse2.usage?.vlm)}`);
  const answer2 = page.locator("#messages .msg.assistant").nth(1);
  await answer2.locator(".usage").waitFor();
  const bars = await answer2.locator(".bars > span").allTextContents();
  const v = sse2.usage.vlm;
  const pct = (x) => `${(100 * x).toFixed(1)}%`;
  if (v.look_m_kv_tokens_before)
    check(bars.includes("LOOK-M KV kept") && bars.some((t) => t.startsWith(pct(v.look_m_kv_tokens_kept / v.look_m_kv_tokens_before)) &&
          t.includes(`${v.look_m_kv_tokens_kept} / ${v.look_m_kv_tokens_before} tokens`)), `LOOK-M bar: ${bars.join(" | ")}`);
  check(v.sink_groups_routed > 0 && bars.includes("SinkRouter groups skipped") &&
        bars.some((t) => t.startsWith(pct(v.sink_groups_skipped_ratio))), `SinkRouter bar: ${bars.join(" | ")}`);
  check(v.look_m_kv_tokens_before > 0, "LOOK-M compressed the prompt with media (usage.vlm.look_m_*)");
  const meters = await answer2.locator(".bar").count();
  check(meters === bars.length / 2, `${meters} bars drawn`);

  if (args.screenshots) {
    fs.mkdirSync(args.screenshots, { recursive: true });
    await page.screenshot({ path: path.join(args.screenshots, "playground_desktop.png") });
    await page.setViewportSize({ width: 390, height: 844 });
    await page.screenshot({ path: path.join(args.screenshots, "playground_phone.png") });
    await page.click("#toggle-settings");
    await page.screenshot({ path: path.join(args.screenshots, "playground_phone_settings.png") });
    await page.click("#toggle-settings");
    await page.setViewportSize({ width: 1280, height: 800 });
    log(`screenshots in ${args.screenshots}`);
  }

  // 5. HTML in the model's answer is text. This one response is hand-written (see the top).
  const evil = ['<img src=x on', 'error="window.__pwned=1">', " and <script>window.__pwned=2</script>", " <b>bold?</b>"];
  const fake = evil.map((t) => `data: ${JSON.stringify({ object: "chat.completion.chunk", choices: [{ index: 0, delta: { content: t } }] })}\n\n`).join("") +
    `data: ${JSON.stringify({ object: "chat.completion.chunk", choices: [], usage: { prompt_tokens: 1, completion_tokens: 4, total_tokens: 5 } })}\n\ndata: [DONE]\n\n`;
  await page.route("**/v1/chat/completions", (route) => route.fulfill({ status: 200, contentType: "text/event-stream", body: fake }));
  await page.evaluate((b64) => {  // an image pasted into the message box
    const dt = new DataTransfer();
    dt.items.add(new File([Uint8Array.from(atob(b64), (c) => c.charCodeAt(0))], "pasted.png", { type: "image/png" }));
    document.getElementById("prompt").dispatchEvent(new ClipboardEvent("paste", { clipboardData: dt, bubbles: true, cancelable: true }));
  }, fs.readFileSync(path.join(FIXTURES, "qwen2vl_server/media/tall.png")).toString("base64"));
  await page.waitForSelector("#attachments li");
  await page.fill("#prompt", "Say <i>hi</i>");
  const [req3] = await Promise.all([
    page.waitForRequest((r) => r.url().endsWith("/v1/chat/completions")),
    page.click("#send"),
  ]);
  const pasted = req3.postDataJSON().messages.at(-1).content[0];
  check(pasted.type === "image_url" && pasted.image_url.url === `data:image/png;base64,${fs.readFileSync(path.join(FIXTURES, "qwen2vl_server/media/tall.png")).toString("base64")}`,
        "a pasted image goes as a data: URL of its bytes");
  const answer3 = page.locator("#messages .msg.assistant").nth(2);
  await answer3.locator(".usage").waitFor();
  await page.unroute("**/v1/chat/completions");
  const injected = async () => page.evaluate(() => ({
    pwned: window.__pwned, img: document.querySelectorAll("#messages img:not([src^='data:'])").length,
    tags: document.querySelectorAll("#messages script, #messages b, #messages i").length,
  }));
  check((await answer3.locator(".text").textContent()) === evil.join(""), "the model's HTML is shown as text");
  check((await page.locator("#messages .msg.user").nth(2).locator(".text").textContent()) === "Say <i>hi</i>", "so is the user's");
  check(JSON.stringify(await injected()) === JSON.stringify({ img: 0, tags: 0 }), "no element and no script came from it");

  // 6. Reload: the conversation comes back from localStorage.
  await page.reload();
  await page.waitForSelector("#messages .msg.assistant >> nth=2");
  check((await page.locator("#messages .msg").count()) === 6 && (await page.locator("#messages .msg.assistant").nth(2).locator(".text").textContent()) === evil.join(""),
        "after a reload the conversation is back from local storage, still as text");
  check((await page.locator("#messages .msg.user img").count()) === 3 && (await page.locator("#conversations li").count()) === 1,
        "with its image, video and pasted-image thumbnails and its entry in the list");
  check(JSON.stringify(await injected()) === JSON.stringify({ img: 0, tags: 0 }), "and nothing injected after the reload");

  const origin = new URL(base).origin;
  const outside = requests.filter((u) => !u.startsWith(`${origin}/`) && !u.startsWith("data:") && !u.startsWith("blob:"));
  check(outside.length === 0, `all ${requests.length} requests went to this server (${outside.join(", ")})`);
  check(problems.length === 0, `no page errors or CSP violations${problems.length ? `: ${problems.join("; ")}` : ""}`);
} catch (e) {
  failed = true;
  console.error(`FAIL: ${e.stack || e}${problems.length ? `\npage problems: ${problems.join("; ")}` : ""}`);
  console.error(`server log:\n${server.log()}`);
} finally {
  if (browser) await browser.close().catch(() => {});
  await stopServer(server.proc);
  fs.rmSync(tmp, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);

// The playground page: conversation list, chat with streaming answers, attachments and the
// per-request settings (sampling, stop, the three attention methods as vlm_options).
import { ApiError, listModels, streamChat } from "./api.js";
import { contentParts, readAttachment } from "./attachments.js";
import { el, messageNode } from "./dom.js";
import { loadConversations, loadSettings, saveConversations, saveSettings } from "./store.js";

const $ = (id) => document.getElementById(id);
const SETTING_IDS = ["api-key", "system", "temperature", "top-p", "top-k", "max-tokens", "seed", "ignore-eos",
  "stop-strings", "sparse-prefill", "look-m", "sink-router", "video-fps", "video-frames", "model"];

const state = loadConversations();
let pending = [];        // attachments of the message being written
let controller = null;   // AbortController of the running request

function status(text, isError = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", isError);
}

const current = () => state.list.find((c) => c.id === state.current) || null;

function newConversation() {
  const c = { id: `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`, title: "New chat", messages: [] };
  state.list.unshift(c);
  state.current = c.id;
  return c;
}

function renderList() {
  const ul = $("conversations");
  ul.replaceChildren(...state.list.map((c) => {
    const open = el("button", { type: "button", className: "open", title: c.title }, c.title);
    open.addEventListener("click", () => { state.current = c.id; persist(); renderAll(); document.body.classList.remove("show-chats"); });
    const del = el("button", { type: "button", className: "delete", title: "Delete", ariaLabel: `Delete ${c.title}` }, "×");
    del.addEventListener("click", () => {
      state.list = state.list.filter((x) => x !== c);
      if (state.current === c.id) state.current = state.list[0]?.id ?? null;
      persist();
      renderAll();
    });
    return el("li", { className: c.id === state.current ? "current" : "" }, open, del);
  }));
}

function renderMessages() {
  const c = current();
  const box = $("messages");
  if (!c || !c.messages.length) {
    box.replaceChildren(el("p", { className: "empty" }, "Ask something, or attach an image or a video."));
    return;
  }
  box.replaceChildren(...c.messages.map(messageNode));
  box.scrollTop = box.scrollHeight;
}

function renderPending() {
  $("attachments").replaceChildren(...pending.map((a, i) => {
    const remove = el("button", { type: "button", title: "Remove", ariaLabel: `Remove ${a.name}` }, "×");
    remove.addEventListener("click", () => { pending.splice(i, 1); renderPending(); });
    const thumb = messageNode({ role: "user", attachments: [a] }).querySelector("figure");
    return el("li", {}, thumb, remove);
  }));
}

function renderAll() {
  renderList();
  renderMessages();
}

function persist() {
  if (!saveConversations(state)) status("local storage is full: this conversation is not saved", true);
}

// Settings: restored from local storage, saved on every change.
function settings() {
  const s = {};
  for (const id of SETTING_IDS) s[id] = $(id).type === "checkbox" ? $(id).checked : $(id).value;
  return s;
}
function restoreSettings() {
  const s = loadSettings();
  for (const id of SETTING_IDS) {
    if (!(id in s) || id === "model") continue;
    if ($(id).type === "checkbox") $(id).checked = !!s[id];
    else $(id).value = s[id];
  }
}

function requestBody(c, s) {
  const num = (v) => (v === "" || v === null ? null : Number(v));
  const messages = [];
  if (s.system.trim()) messages.push({ role: "system", content: s.system });
  for (const m of c.messages) {
    if (m.streaming || m.error) continue;
    messages.push({ role: m.role, content: m.role === "user" ? contentParts(m.text, m.attachments) : m.text });
  }
  const body = { model: s.model, messages, stream: true, stream_options: { include_usage: true } };
  for (const [key, id] of [["temperature", "temperature"], ["top_p", "top-p"], ["max_tokens", "max-tokens"], ["seed", "seed"]])
    if (num(s[id]) !== null) body[key] = num(s[id]);
  if (num(s["top-k"]) > 0) body.top_k = num(s["top-k"]);
  if (s["ignore-eos"]) body.ignore_eos = true;
  const stop = s["stop-strings"].split("\n").filter((x) => x.length);
  if (stop.length) body.stop = stop;
  const vlm = {};
  if (s["sparse-prefill"]) vlm.sparse_prefill = s["sparse-prefill"];
  if (s["look-m"]) vlm.look_m = s["look-m"];
  if (s["sink-router"]) vlm.sink_router = s["sink-router"] === "on";
  if (Object.keys(vlm).length) body.vlm_options = vlm;
  return body;
}

function busy(on) {
  $("send").disabled = on;
  $("stop").hidden = !on;
}

async function send() {
  if (controller) return;
  const text = $("prompt").value.trim();
  if (!text && !pending.length) return;
  const c = current() || newConversation();
  if (!c.messages.length) c.title = (text || pending[0].name).slice(0, 60);
  c.messages.push({ role: "user", text, attachments: pending });
  pending = [];
  $("prompt").value = "";
  renderPending();
  const s = settings();
  const body = requestBody(c, s);
  const answer = { role: "assistant", text: "", model: s.model, streaming: true };
  c.messages.push(answer);
  persist();
  renderAll();
  const node = $("messages").lastElementChild;
  const textNode = node.querySelector(".text");
  controller = new AbortController();
  busy(true);
  status("generating…");
  try {
    const r = await streamChat(body, {
      apiKey: s["api-key"], signal: controller.signal,
      onDelta: (t) => {
        answer.text += t;
        textNode.textContent = answer.text;
        $("messages").scrollTop = $("messages").scrollHeight;
      },
    });
    answer.stats = { prompt_tokens: r.usage?.prompt_tokens, completion_tokens: r.usage?.completion_tokens, ttft_ms: r.ttft_ms,
      tokens_per_s: r.tokens_per_s, finish_reason: r.finish_reason, vlm: r.usage?.vlm, deltas: r.deltas };
    status("");
  } catch (e) {
    answer.error = e.name === "AbortError" ? "stopped" : e.message;
    status(e.message, e.name !== "AbortError");
    if (e instanceof ApiError && e.status === 401) $("api-key").focus();
  } finally {
    delete answer.streaming;
    controller = null;
    busy(false);
    persist();
    renderAll();
  }
}

async function refreshModels() {
  const select = $("model");
  const want = loadSettings().model || select.value;
  try {
    const ids = await listModels($("api-key").value);
    select.replaceChildren(...ids.map((id) => el("option", { value: id }, id)));
    if (ids.includes(want)) select.value = want;
    status(ids.length ? "" : "the server lists no model");
  } catch (e) {
    select.replaceChildren();
    status(e instanceof ApiError && e.status === 401 ? "this server needs an API key (Settings)" : `cannot list models: ${e.message}`, true);
  }
}

async function attach(files) {
  const s = settings();
  for (const f of files) {
    try {
      status(`reading ${f.name || "file"}…`);
      pending.push(await readAttachment(f, { fps: Number(s["video-fps"]) || 2, maxFrames: Number(s["video-frames"]) || 8 }));
      status("");
    } catch (e) {
      status(e.message, true);
    }
  }
  renderPending();
}

function wire() {
  $("composer").addEventListener("submit", (e) => { e.preventDefault(); send(); });
  $("prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
  });
  $("stop").addEventListener("click", () => controller?.abort());
  $("new-chat").addEventListener("click", () => { newConversation(); persist(); renderAll(); $("prompt").focus(); });
  $("file").addEventListener("change", async (e) => { await attach([...e.target.files]); e.target.value = ""; });
  document.addEventListener("paste", (e) => {
    const files = [...(e.clipboardData?.files || [])];
    if (files.length) { e.preventDefault(); attach(files); }
  });
  document.addEventListener("dragover", (e) => { e.preventDefault(); document.body.classList.add("dragging"); });
  document.addEventListener("dragleave", (e) => { if (!e.relatedTarget) document.body.classList.remove("dragging"); });
  document.addEventListener("drop", (e) => {
    e.preventDefault();
    document.body.classList.remove("dragging");
    attach([...(e.dataTransfer?.files || [])]);
  });
  for (const id of SETTING_IDS) $(id).addEventListener("change", () => saveSettings(settings()));
  $("api-key").addEventListener("change", refreshModels);
  $("toggle-chats").addEventListener("click", () => document.body.classList.toggle("show-chats"));
  $("toggle-settings").addEventListener("click", () => document.body.classList.toggle("show-settings"));
}

restoreSettings();
wire();
if (!current() && state.list.length) state.current = state.list[0].id;
renderAll();
refreshModels();

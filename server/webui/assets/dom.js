// DOM building without HTML strings: every text (the model's words, the user's, file names,
// error messages) goes in through textContent, so nothing anyone writes becomes markup. The page's
// Content-Security-Policy also requires Trusted Types, which makes innerHTML and friends throw.

// el("div", {className: "x", title: "t"}, "text", child, ...): props are DOM properties (never
// event handlers); string children become text nodes.
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k.startsWith("on")) throw new Error("el: no event handler properties");
    if (k === "dataset") Object.assign(node.dataset, v);
    else node[k] = v;
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(typeof c === "string" ? document.createTextNode(c) : c);
  return node;
}

// Only images the user picked (data: URLs made by FileReader or a canvas) are shown.
export function safeImageUrl(url) {
  return typeof url === "string" && /^data:image\/(png|jpeg|gif|webp|bmp);base64,/.test(url) ? url : "";
}

function mediaFigure(a) {
  const src = safeImageUrl(a.kind === "video" ? (a.frames || [])[0] : a.url);
  const caption = a.kind === "video" ? `${a.name} · video, ${(a.frames || []).length} frames at ${a.fps} fps` : a.name;
  return el("figure", {}, src ? el("img", { src, alt: a.name || a.kind }) : el("span", {}, "[not kept]"), el("figcaption", {}, caption));
}

const fmt = (x, digits) => (Number.isFinite(x) ? x.toFixed(digits) : "–");

// The figures of usage.vlm as labelled bars: [label, fraction, detail].
export function vlmBars(vlm) {
  if (!vlm || typeof vlm !== "object") return [];
  const bars = [];
  const num = (k) => (typeof vlm[k] === "number" ? vlm[k] : null);
  if (num("look_m_kv_tokens_before") > 0) {
    const kept = num("look_m_kv_tokens_kept"), before = num("look_m_kv_tokens_before");
    bars.push(["LOOK-M KV kept", kept / before, `${kept} / ${before} tokens`]);
  }
  if (num("sink_groups_routed") > 0) {
    const skipped = num("sink_groups_skipped"), routed = num("sink_groups_routed");
    bars.push(["SinkRouter groups skipped", skipped / routed, `${skipped} / ${routed}`]);
  }
  // Figures added later by the server: any other ratio.
  for (const [k, v] of Object.entries(vlm))
    if (k.endsWith("_ratio") && k !== "sink_groups_skipped_ratio" && typeof v === "number") bars.push([k.replace(/_/g, " "), v, ""]);
  return bars;
}

function statsBlock(s) {
  const parts = [
    ["prompt", `${s.prompt_tokens ?? "–"} tokens`], ["completion", `${s.completion_tokens ?? "–"} tokens`],
    ["TTFT", `${fmt(s.ttft_ms, 0)} ms`], ["decode", `${fmt(s.tokens_per_s, 1)} tokens/s`],
  ];
  if (s.finish_reason) parts.push(["finish", s.finish_reason]);
  const usage = el("div", { className: "usage", title: "TTFT and tokens/s as this browser measured them" },
    ...parts.map(([k, v]) => el("span", { dataset: { stat: k } }, `${k} ${v}`)));
  const grid = el("div", { className: "bars" });
  for (const [label, frac, detail] of vlmBars(s.vlm)) {
    const clamped = Math.max(0, Math.min(1, frac));
    const fill = el("span", { className: "fill" });
    fill.style.width = `${(clamped * 100).toFixed(1)}%`;  // CSSOM, allowed by style-src 'self'
    const bar = el("div", { className: "bar", role: "meter", ariaLabel: label, ariaValueNow: String(clamped), ariaValueMin: "0", ariaValueMax: "1" }, fill);
    grid.append(el("span", { className: "label" }, label), bar,
      el("span", { className: "value" }, `${(clamped * 100).toFixed(1)}%${detail ? ` (${detail})` : ""}`));
  }
  return grid.childElementCount ? [usage, grid] : [usage];
}

// One message: {role, text, attachments, stats?, error?, streaming?}.
export function messageNode(m) {
  const node = el("article", { className: `msg ${m.role}${m.streaming ? " streaming" : ""}` },
    el("div", { className: "who" }, m.role === "user" ? "You" : m.model ? `Assistant · ${m.model}` : "Assistant"));
  if (m.attachments?.length) node.append(el("div", { className: "media" }, ...m.attachments.map(mediaFigure)));
  node.append(el("div", { className: "text" }, m.text || ""));
  if (m.error) node.append(el("div", { className: "error", role: "alert" }, m.error));
  if (m.stats) {
    node.dataset.deltas = String(m.stats.deltas ?? "");  // content deltas the answer came in
    node.append(...statsBlock(m.stats));
  }
  return node;
}

// Files the user attaches (picked, dropped or pasted): images as data: URLs, videos cut into
// frames in the browser (a <video> of a blob: URL drawn onto a canvas) and sent as a frame list
// with its rate, the form vlm-server takes for the Qwen2-VL family.

function readAsDataUrl(file) {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(r.result);
    r.onerror = () => reject(new Error(`cannot read ${file.name}`));
    r.readAsDataURL(file);
  });
}

function once(target, event) {
  return new Promise((resolve, reject) => {
    target.addEventListener(event, resolve, { once: true });
    target.addEventListener("error", () => reject(new Error("the browser cannot decode this video")), { once: true });
  });
}

// Frames at `fps` (fewer, evenly spread, when the clip holds more than maxFrames), each scaled
// so that its longer side is at most maxSide, as JPEG data: URLs. The rate sent is the rate of
// the frames taken.
async function videoFrames(file, fps, maxFrames, maxSide = 448) {
  const url = URL.createObjectURL(file);
  try {
    const video = document.createElement("video");
    video.muted = true;
    video.preload = "auto";
    video.src = url;
    await once(video, "loadeddata");
    if (video.duration === Infinity) {  // recordings (MediaRecorder) may not state it: seek past the end
      video.currentTime = 1e9;
      await once(video, "seeked");
    }
    const duration = Number.isFinite(video.duration) && video.duration > 0 ? video.duration : 1 / fps;
    const count = Math.max(1, Math.min(maxFrames, Math.floor(duration * fps)));
    const rate = count / duration < fps ? count / duration : fps;
    const scale = Math.min(1, maxSide / Math.max(video.videoWidth, video.videoHeight));
    const canvas = document.createElement("canvas");
    canvas.width = Math.max(1, Math.round(video.videoWidth * scale));
    canvas.height = Math.max(1, Math.round(video.videoHeight * scale));
    const ctx = canvas.getContext("2d");
    const frames = [];
    for (let i = 0; i < count; ++i) {
      video.currentTime = Math.min((i + 0.5) / rate, Math.max(0, duration - 1e-3));
      await once(video, "seeked");
      ctx.drawImage(video, 0, 0, canvas.width, canvas.height);
      frames.push(canvas.toDataURL("image/jpeg", 0.9));
    }
    return { frames, fps: Number(rate.toFixed(4)) };
  } finally {
    URL.revokeObjectURL(url);
  }
}

// An attachment {kind: "image", name, url} or {kind: "video", name, frames, fps}; throws for
// other files.
export async function readAttachment(file, { fps, maxFrames }) {
  if (file.type.startsWith("image/")) return { kind: "image", name: file.name || "pasted image", url: await readAsDataUrl(file) };
  if (file.type.startsWith("video/")) return { kind: "video", name: file.name || "video", ...(await videoFrames(file, fps, maxFrames)) };
  throw new Error(`${file.name || "this file"}: only images and videos can be attached`);
}

// The user message's content parts: media first (as the Qwen and LLaVA templates expect), then text.
export function contentParts(text, attachments) {
  const parts = [];
  for (const a of attachments || []) {
    if (a.kind === "image" && a.url) parts.push({ type: "image_url", image_url: { url: a.url } });
    if (a.kind === "video" && a.frames?.length) parts.push({ type: "video_url", video_url: { url: a.frames, fps: a.fps } });
  }
  if (!parts.length) return text;
  if (text) parts.push({ type: "text", text });
  return parts;
}

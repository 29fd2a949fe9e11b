// Conversations and settings in this browser's localStorage (nothing leaves the browser but the
// requests to this server). Attachments are kept as data: URLs; when the storage is full, the
// oldest ones are dropped (shown as "[not kept]") until the rest fits.

const CONVERSATIONS = "vlm-playground/conversations/v1";
const SETTINGS = "vlm-playground/settings/v1";

function read(key, fallback) {
  try {
    const v = JSON.parse(localStorage.getItem(key));
    return v ?? fallback;
  } catch {
    return fallback;
  }
}

export function loadConversations() {
  const v = read(CONVERSATIONS, null);
  return v && Array.isArray(v.list) ? v : { list: [], current: null };
}

function dropOldestAttachment(state) {
  for (const c of [...state.list].reverse())  // the list is newest first
    for (const m of c.messages)
      for (const a of m.attachments || [])
        if (a.url || a.frames?.length) {
          delete a.url;
          a.frames = [];
          return true;
        }
  return false;
}

// Saves; returns false (and leaves the page working) when even without attachments it does not fit.
export function saveConversations(state) {
  for (;;) {
    try {
      localStorage.setItem(CONVERSATIONS, JSON.stringify(state));
      return true;
    } catch (e) {
      if (e?.name !== "QuotaExceededError" || !dropOldestAttachment(state)) return false;
    }
  }
}

export const loadSettings = () => read(SETTINGS, {});
export function saveSettings(s) {
  try { localStorage.setItem(SETTINGS, JSON.stringify(s)); } catch { /* full: settings stay in the form */ }
}

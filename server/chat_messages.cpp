#include "server/chat_messages.h"

#include <vector>

#include "kernels/core/check.h"

namespace vlm {
namespace {

using json = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw RequestError(400, "invalid_request_error", message, param);
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

// A message's content as parts: null/missing -> none, a string -> one text part.
json content_parts(const json& m) {
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) return json::array();
  if (it->is_string()) return json::array({json{{"type", "text"}, {"text", *it}}});
  return *it;
}

bool is_text(const json& part) { return part.is_object() && part.value("type", "") == "text"; }

// Joined text parts, or nullopt when some part is not text.
std::optional<std::string> all_text(const json& parts) {
  std::vector<std::string> texts;
  for (const json& p : parts) {
    if (!is_text(p)) return std::nullopt;
    texts.push_back(p["text"].get<std::string>());
  }
  return join(texts, "\n");
}

// string format: "\n".join(placeholders + [text]) (text left out when empty), as vLLM.
std::string string_content(const json& parts, const ChatMessagesOptions& o) {
  std::vector<std::string> placeholders, texts;
  for (const json& p : parts) {
    const std::string type = p.value("type", "");
    if (type == "text") texts.push_back(p["text"].get<std::string>());
    else if (type == "image") placeholders.push_back(o.image_placeholder);
    else if (type == "video") placeholders.push_back(o.video_placeholder);
  }
  const std::string text = join(texts, "\n");
  if (!text.empty()) placeholders.push_back(text);
  return join(placeholders, "\n");
}

void normalize_tool_calls(json& m) {
  auto it = m.find("tool_calls");
  if (it == m.end()) return;
  if (it->is_null() || (it->is_array() && it->empty())) {
    m.erase("tool_calls");
    return;
  }
  for (json& call : *it) {
    json& fn = call["function"];
    json& args = fn["arguments"];
    if (args.is_string()) {
      try {
        args = json::parse(args.get<std::string>());
      } catch (const json::exception&) {
        args = json::object();
      }
    }
    if (!args.is_object() && !args.is_array()) args = json::object();
  }
}

// Developer messages as system messages, then the system messages merged into the first
// message when one is not first or there are several (vLLM, for templates without "developer").
json developer_as_system(json messages) {
  bool any = false;
  for (json& m : messages)
    if (m["role"] == "developer") {
      m["role"] = "system";
      m.erase("tools");
      any = true;
    }
  if (!any) return messages;
  int num_system = 0;
  bool merge = false;
  for (size_t i = 0; i < messages.size(); ++i)
    if (messages[i]["role"] == "system") merge = merge || i > 0 || num_system++ > 0;
  if (!merge) return messages;
  std::vector<std::string> contents;
  json out = json::array({json{{"role", "system"}, {"content", ""}}});
  for (json& m : messages) {
    if (m["role"] != "system") {
      out.push_back(std::move(m));
      continue;
    }
    std::string text;
    const json& c = m["content"];
    if (c.is_string()) {
      text = c.get<std::string>();
    } else if (c.is_array()) {
      std::vector<std::string> texts;
      for (const json& p : c)
        if (p.is_object() && p.contains("text") && p["text"].is_string()) texts.push_back(p["text"].get<std::string>());
      text = join(texts, "\n");
    }
    if (!text.empty()) contents.push_back(std::move(text));
  }
  out[0]["content"] = join(contents, "\n\n");
  return out;
}

}  // namespace

std::optional<json> canonical_content_part(const json& part, const std::string& where) {
  if (part.is_string()) return json{{"type", "text"}, {"text", part}};
  if (!part.is_object()) bad(where, where + " must be a string or an object with a 'type'");
  json out = part;
  auto type_it = part.find("type");
  if (type_it == part.end() || type_it->is_null()) {
    if (part.contains("image_url")) out["type"] = "image_url";
    else if (part.contains("video_url")) out["type"] = "video_url";
    else bad(where + ".type", where + " has no 'type'");
    return out;
  }
  if (!type_it->is_string()) bad(where + ".type", where + ".type must be a string");
  const std::string type = type_it->get<std::string>();
  const char* field = nullptr;
  if (type == "text" || type == "input_text" || type == "output_text") field = "text";
  else if (type == "refusal") field = "refusal";
  else if (type == "thinking") field = "thinking";
  if (field) {
    auto t = part.find(field);
    if (t == part.end() || t->is_null()) return std::nullopt;
    if (!t->is_string()) bad(where + "." + field, where + "." + field + " must be a string");
    return json{{"type", "text"}, {"text", *t}};
  }
  if (type == "image_url" || type == "video_url" || type == "video") return out;
  bad(where + ".type", "unsupported content part type '" + type + "' in " + where +
                           " (supported: text, input_text, output_text, refusal, thinking, image_url, "
                           "video_url, video)");
}

void validate_message_fields(const json& m, const std::string& where) {
  if (auto id = m.find("tool_call_id"); id != m.end() && !id->is_null() && !id->is_string())
    bad(where + ".tool_call_id", where + ".tool_call_id must be a string");
  auto calls = m.find("tool_calls");
  if (calls == m.end() || calls->is_null()) return;
  if (!calls->is_array()) bad(where + ".tool_calls", where + ".tool_calls must be a list");
  for (size_t k = 0; k < calls->size(); ++k) {
    const json& c = (*calls)[k];
    const std::string cw = where + ".tool_calls[" + std::to_string(k) + "]";
    if (!c.is_object()) bad(cw, cw + " must be an object");
    auto fn = c.find("function");
    if (fn == c.end() || !fn->is_object()) bad(cw + ".function", cw + ".function must be an object");
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string()) bad(cw + ".function.name", cw + ".function.name must be a string");
  }
}

json prepare_chat_messages(const json& messages, const ChatMessagesOptions& o) {
  json out = json::array();
  for (const json& m : messages) {
    json msg = m;
    const json parts = content_parts(m);
    const std::string role = m.value("role", "");
    if (o.format == ChatContentFormat::String) {
      msg["content"] = string_content(parts, o);
    } else if (auto text = all_text(parts); role == "tool" && text) {
      msg["content"] = *text;
    } else {
      msg["content"] = parts;
    }
    if (role == "assistant") normalize_tool_calls(msg);
    out.push_back(std::move(msg));
  }
  return o.developer_role ? out : developer_as_system(std::move(out));
}

std::string final_message_text(const json& messages) {
  if (!messages.is_array() || messages.empty()) return "";
  const json parts = content_parts(messages.back());
  for (auto it = parts.rbegin(); it != parts.rend(); ++it)
    if (is_text(*it)) return (*it)["text"].get<std::string>();
  return "";
}

}  // namespace vlm

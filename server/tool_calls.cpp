#include "server/tool_calls.h"

#include <random>

#include <fmt/format.h>

#include "kernels/core/check.h"

namespace vlm {

using ojson = nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw RequestError(400, "invalid_request_error", message, param);
}

const ojson* function_named(const ToolSettings& t, const std::string& name) {
  for (const auto& tool : t.tools)
    if (tool["function"]["name"] == name) return &tool["function"];
  return nullptr;
}

ojson parameters_of(const ojson& function) {
  return function.contains("parameters") ? function["parameters"] : ojson{{"type", "object"}};
}

// A call object {"name": N, "arguments"|"parameters": {...}} -> ToolCall (nullopt otherwise).
std::optional<ToolCall> call_of(const ojson& j) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  const ojson* args = j.contains("arguments") ? &j["arguments"] : j.contains("parameters") ? &j["parameters"] : nullptr;
  ToolCall c;
  c.name = j["name"].get<std::string>();
  c.arguments = args ? (args->is_string() ? args->get<std::string>() : args->dump()) : "{}";
  return c;
}

std::optional<ojson> parse_json(const std::string& s) {
  try {
    return ojson::parse(s);
  } catch (const ojson::exception&) {
    return std::nullopt;
  }
}

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>", kPythonTag = "<|python_tag|>";

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

ToolOutput parse_hermes(const std::string& text) {
  ToolOutput out;
  size_t at = text.find(kOpen);
  if (at == std::string::npos) return {text, {}};
  out.content = text.substr(0, at);
  while (at != std::string::npos) {
    const size_t body = at + kOpen.size();
    size_t end = text.find(kClose, body);
    const std::string inner = text.substr(body, end == std::string::npos ? std::string::npos : end - body);
    const auto j = parse_json(trim(inner));
    const auto call = j ? call_of(*j) : std::nullopt;
    if (!call) return {text, {}};  // not a well-formed call: the whole reply is content
    out.calls.push_back(*call);
    if (end == std::string::npos) break;
    at = text.find(kOpen, end + kClose.size());
  }
  out.content = trim(out.content);
  return out;
}

ToolOutput parse_llama3(const std::string& text) {
  std::string s = trim(text);
  if (s.starts_with(kPythonTag)) s = trim(s.substr(kPythonTag.size()));
  if (!s.starts_with("{")) return {text, {}};
  ToolOutput out;
  size_t start = 0;
  // One object, or several joined by ";".
  while (start < s.size()) {
    size_t end = s.find(';', start);
    std::optional<ojson> j;
    while (true) {
      j = parse_json(trim(s.substr(start, end == std::string::npos ? std::string::npos : end - start)));
      if (j || end == std::string::npos) break;
      end = s.find(';', end + 1);  // the ';' was inside a string
    }
    const auto call = j ? call_of(*j) : std::nullopt;
    if (!call) return {text, {}};
    out.calls.push_back(*call);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

}  // namespace

ToolSettings parse_tool_settings(const ojson& body) {
  ToolSettings t;
  auto it = body.find("tools");
  const bool has_tools = it != body.end() && !it->is_null();
  if (has_tools) {
    if (!it->is_array() || it->empty()) bad("tools", "'tools' must be a non-empty list");
    for (size_t i = 0; i < it->size(); ++i) {
      const ojson& tool = (*it)[i];
      const std::string where = fmt::format("tools[{}]", i);
      if (!tool.is_object() || tool.value("type", "") != "function" || !tool.contains("function") ||
          !tool["function"].is_object())
        bad(where, where + " must be {\"type\": \"function\", \"function\": {...}}");
      const ojson& f = tool["function"];
      if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
        bad(where + ".function.name", where + ".function.name must be a non-empty string");
      if (f.contains("parameters") && !f["parameters"].is_object() && !f["parameters"].is_null())
        bad(where + ".function.parameters", where + ".function.parameters must be a JSON Schema object");
      t.tools.push_back(tool);
    }
    t.choice = ToolChoice::Auto;
  }
  auto c = body.find("tool_choice");
  if (c == body.end() || c->is_null()) return t;
  if (c->is_string()) {
    const std::string s = c->get<std::string>();
    if (s == "none") t.choice = ToolChoice::None;
    else if (s == "auto") t.choice = has_tools ? ToolChoice::Auto : ToolChoice::None;
    else if (s == "required") t.choice = ToolChoice::Required;
    else bad("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or a named function");
  } else if (c->is_object() && c->contains("function") && (*c)["function"].is_object() &&
             (*c)["function"].contains("name") && (*c)["function"]["name"].is_string()) {
    t.choice = ToolChoice::Named;
    t.named = (*c)["function"]["name"].get<std::string>();
  } else {
    bad("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
  }
  if ((t.choice == ToolChoice::Required || t.choice == ToolChoice::Named) && !has_tools)
    bad("tool_choice", "'tool_choice' \"required\" or a named function needs 'tools'");
  if (t.choice == ToolChoice::Named && !function_named(t, t.named))
    bad("tool_choice", "tool_choice names '" + t.named + "', which is not in 'tools'");
  return t;
}

std::optional<structured::ConstraintSpec> tool_constraint(const ToolSettings& t) {
  using Kind = structured::ConstraintSpec::Kind;
  if (t.choice == ToolChoice::Named) return structured::ConstraintSpec{Kind::JsonSchema, parameters_of(*function_named(t, t.named)).dump(), {}};
  if (t.choice != ToolChoice::Required) return std::nullopt;
  ojson any_of = ojson::array();
  for (const auto& tool : t.tools) {
    const ojson& f = tool["function"];
    any_of.push_back({{"type", "object"},
                      {"properties", {{"name", {{"const", f["name"]}}}, {"parameters", parameters_of(f)}}},
                      {"required", {"name", "parameters"}}});
  }
  const ojson schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", any_of}}}};
  return structured::ConstraintSpec{Kind::JsonSchema, schema.dump(), {}};
}

ToolCallFormat tool_call_format(const std::string& source) {
  return source.find("<tool_call>") != std::string::npos || source.find("tool_call") == std::string::npos
             ? ToolCallFormat::Hermes
             : ToolCallFormat::Llama3Json;
}

ToolOutput parse_tool_output(const std::string& text, const ToolSettings& t, ToolCallFormat format) {
  if (!t.active()) return {text, {}};
  if (t.choice == ToolChoice::Named) return {"", {{t.named, text}}};
  if (t.choice == ToolChoice::Required) {
    ToolOutput out;
    const auto j = parse_json(text);
    if (j && j->is_array())
      for (const auto& e : *j)
        if (auto c = call_of(e)) out.calls.push_back(*c);
    if (out.calls.empty()) out.content = text;  // cut short (length): no calls to report
    return out;
  }
  return format == ToolCallFormat::Hermes ? parse_hermes(text) : parse_llama3(text);
}

nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    nlohmann::json c = {{"id", fmt::format("call_{:016x}", rng())}, {"type", "function"},
                        {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (with_index) c["index"] = i;
    out.push_back(std::move(c));
  }
  return out;
}

std::string ToolCallStreamer::push(const std::string& text) {
  all_ += text;
  if (holding_ || t_.choice == ToolChoice::Required || t_.choice == ToolChoice::Named) {
    holding_ = true;
    return "";
  }
  if (f_ == ToolCallFormat::Llama3Json) {
    const std::string s = trim(all_);
    if (sent_ == 0 && (s.empty() || s.starts_with("{") || kPythonTag.starts_with(s.substr(0, kPythonTag.size())) ||
                       s.starts_with(kPythonTag))) {
      holding_ = !s.empty() && (s.starts_with("{") || s.starts_with(kPythonTag));
      return "";
    }
    std::string out = all_.substr(sent_);
    sent_ = all_.size();
    return out;
  }
  const size_t open = all_.find(kOpen, sent_);
  size_t safe = open != std::string::npos ? open : all_.size();
  if (open == std::string::npos)  // keep back a tail that may be the start of "<tool_call>"
    for (size_t k = std::min(kOpen.size() - 1, all_.size() - sent_); k > 0; --k)
      if (kOpen.starts_with(std::string_view(all_).substr(all_.size() - k))) {
        safe = all_.size() - k;
        break;
      }
  std::string out = all_.substr(sent_, safe - sent_);
  sent_ = safe;
  holding_ = open != std::string::npos;
  return out;
}

ToolOutput ToolCallStreamer::finish() {
  ToolOutput o = parse_tool_output(all_, t_, f_);
  if (o.calls.empty()) return {all_.substr(sent_), {}};
  // Content before the calls was partly sent: only the rest goes now.
  if (t_.choice == ToolChoice::Auto && f_ == ToolCallFormat::Hermes) {
    const size_t open = all_.find(kOpen);
    o.content = open > sent_ ? trim(all_.substr(sent_, open - sent_)) : "";
  } else {
    o.content.clear();
  }
  return o;
}

}  // namespace vlm

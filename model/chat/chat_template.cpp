#include "model/chat/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "kernels/core/check.h"
#include "model/chat/jinja/error.h"
#include "model/chat/jinja/json_value.h"
#include "model/tokenizer/tokenizer.h"

namespace vlm {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw LoadError("cannot open " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw LoadError("cannot read " + path.string());
  return ss.str();
}

ordered_json read_json(const fs::path& path) {
  std::string text = read_file(path);
  try {
    return ordered_json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw LoadError("invalid JSON in " + path.string() + ": " + e.what());
  }
}

// tokenizer_config.json's chat_template: a string, or named templates of which "default" is
// the one apply_chat_template uses without an explicit name.
std::optional<std::string> config_template(const ordered_json& config, const fs::path& path) {
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const auto& entry : *it) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string())
        return entry["template"].get<std::string>();
    }
    throw LoadError(path.string() + ": chat_template lists named templates but none named \"default\"");
  }
  throw LoadError(path.string() + ": chat_template must be a string or a list of {name, template}");
}

}  // namespace

std::optional<ChatTemplate> ChatTemplate::load(const std::string& model_dir) {
  fs::path dir(model_dir);
  fs::path jinja_file = dir / "chat_template.jinja";
  if (fs::exists(jinja_file)) return parse(read_file(jinja_file), jinja_file.string());

  fs::path config_file = dir / "tokenizer_config.json";
  if (fs::exists(config_file)) {
    if (auto source = config_template(read_json(config_file), config_file))
      return parse(std::move(*source), config_file.string() + " (chat_template)");
  }
  fs::path json_file = dir / "chat_template.json";
  if (fs::exists(json_file)) {
    ordered_json j = read_json(json_file);
    if (!j.is_object() || !j.contains("chat_template") || !j["chat_template"].is_string())
      throw LoadError(json_file.string() + ": expected an object with a string \"chat_template\"");
    return parse(j["chat_template"].get<std::string>(), json_file.string() + " (chat_template)");
  }
  return std::nullopt;
}

ChatTemplate ChatTemplate::parse(std::string source, std::string origin) {
  try {
    jinja::Template t = jinja::Template::parse(source);
    return ChatTemplate(std::move(source), std::move(origin), std::move(t));
  } catch (const jinja::Error& e) {
    throw LoadError("chat template " + origin + ": line " + std::to_string(e.line()) + ", column " +
                    std::to_string(e.column()) + ": " + e.message());
  }
}

ordered_json ChatTemplate::special_tokens(const std::string& model_dir) {
  ordered_json out = ordered_json::object();
  fs::path config_file = fs::path(model_dir) / "tokenizer_config.json";
  if (!fs::exists(config_file)) return out;
  ordered_json config = read_json(config_file);
  if (!config.is_object()) throw LoadError(config_file.string() + ": expected a JSON object");
  auto token_text = [](const ordered_json& v) -> std::optional<std::string> {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string())
      return v["content"].get<std::string>();
    return std::nullopt;
  };
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"}) {
    if (auto it = config.find(key); it != config.end())
      if (auto text = token_text(*it)) out[key] = *text;
  }
  if (auto it = config.find("additional_special_tokens"); it != config.end() && it->is_array()) {
    ordered_json list = ordered_json::array();
    for (const auto& t : *it)
      if (auto text = token_text(t)) list.push_back(*text);
    out["additional_special_tokens"] = std::move(list);
  }
  return out;
}

template <typename Json>
std::string ChatTemplate::render_impl(const Json& messages, const Json& context) const {
  if (!context.is_null() && !context.is_object())
    throw RequestError(400, "invalid_request_error", "chat template context must be an object");
  std::vector<std::pair<std::string, jinja::Value>> vars;
  vars.emplace_back("messages", jinja::from_json(messages));
  bool has_gen = false, has_tools = false, has_docs = false;
  if (context.is_object()) {
    for (auto it = context.begin(); it != context.end(); ++it) {
      if (it.key() == "messages") continue;
      has_gen |= it.key() == "add_generation_prompt";
      has_tools |= it.key() == "tools";
      has_docs |= it.key() == "documents";
      vars.emplace_back(it.key(), jinja::from_json(it.value()));
    }
  }
  if (!has_tools) vars.emplace_back("tools", jinja::Value::none());
  if (!has_docs) vars.emplace_back("documents", jinja::Value::none());
  if (!has_gen) vars.emplace_back("add_generation_prompt", jinja::Value(false));
  try {
    return template_.render(std::move(vars));
  } catch (const jinja::Error& e) {
    if (e.kind() == jinja::ErrorKind::kRaised)
      throw RequestError(400, "invalid_request_error", "chat template rejected the request: " + e.message(), "messages");
    throw RequestError(400, "invalid_request_error",
                       "chat template error (line " + std::to_string(e.line()) + ", column " +
                           std::to_string(e.column()) + "): " + e.message(),
                       "messages");
  }
}

std::string ChatTemplate::render(const ordered_json& messages, const ordered_json& context) const {
  return render_impl(messages, context);
}

std::string ChatTemplate::render(const nlohmann::json& messages, const nlohmann::json& context) const {
  return render_impl(messages, context);
}

void ChatTemplate::add_tokenizer_defaults(nlohmann::ordered_json& context, const Tokenizer& tok,
                                          bool add_generation_prompt) {
  if (!context.contains("add_generation_prompt")) context["add_generation_prompt"] = add_generation_prompt;
  if (!context.contains("bos_token")) context["bos_token"] = tok.bos_token();
  if (!context.contains("eos_token")) context["eos_token"] = tok.eos_token();
}

}  // namespace vlm

// A model's chat template: the Jinja template Hugging Face's apply_chat_template renders, parsed
// once at load and rendered per request with jinja2's semantics as HF configures them
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, tojson with
// ensure_ascii=False, raise_exception, strftime_now). See model/chat/jinja/ for the interpreter.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "model/chat/chat_content_format.h"
#include "model/chat/jinja/template.h"

namespace vlm {

class Tokenizer;

class ChatTemplate {
 public:
  // Finds the template in model_dir in Hugging Face's order of precedence:
  //   1. chat_template.jinja (transformers lets this file override the config's template),
  //   2. tokenizer_config.json's "chat_template": a string, or a list of {name, template}
  //      entries of which "default" is used,
  //   3. chat_template.json ({"chat_template": ...}, the processor's legacy file).
  // Parses at load. Throws LoadError naming the file (and for a template that does not parse,
  // the line and column). Returns nullopt when the directory has no template.
  static std::optional<ChatTemplate> load(const std::string& model_dir);

  // Parses source; origin names it in errors (a file path). Throws LoadError.
  static ChatTemplate parse(std::string source, std::string origin);

  // The variables HF passes from the tokenizer's special tokens map: bos_token, eos_token,
  // unk_token, sep_token, pad_token, cls_token, mask_token (those set and not null in
  // tokenizer_config.json, as strings or {"content": ...} objects) and
  // additional_special_tokens. An empty object when the file is absent. Throws LoadError
  // when the file is not valid JSON.
  static nlohmann::ordered_json special_tokens(const std::string& model_dir);

  // The variables HF's apply_chat_template takes from the tokenizer, each set only where
  // `context` lacks it: bos_token and eos_token (the tokenizer's; "" when it has none) and
  // add_generation_prompt. The one place the server and the tools build a template's context.
  static void add_tokenizer_defaults(nlohmann::ordered_json& context, const Tokenizer& tok,
                                     bool add_generation_prompt);

  // Renders messages (the OpenAI-style JSON array: role, content as a string or a list of
  // parts, tool_calls, ...). context holds add_generation_prompt, the special tokens and any
  // extra template variables (tools, enable_thinking, add_vision_id, ...); like HF, tools and
  // documents default to none and add_generation_prompt to false. Key order of JSON objects
  // is visible to templates (tojson, items()): the ordered_json overload keeps the request's
  // order as Python would; nlohmann::json has sorted keys.
  // Throws RequestError(400, "invalid_request_error", ..., "messages") for raise_exception()
  // and for any error evaluating the template on this input.
  std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& context) const;
  std::string render(const nlohmann::json& messages, const nlohmann::json& context) const;

  const std::string& source() const { return source_; }
  const std::string& origin() const { return origin_; }
  // How the template reads message content (model/chat/chat_content_format.h), detected at parse.
  ChatContentFormat content_format() const { return content_format_; }
  // Whether the template names the "developer" role (else developer messages render as system).
  bool supports_developer_role() const { return template_supports_developer_role(source_); }

 private:
  ChatTemplate(std::string source, std::string origin, jinja::Template tmpl)
      : source_(std::move(source)), origin_(std::move(origin)), template_(std::move(tmpl)),
        content_format_(detect_chat_content_format(template_)) {}
  template <typename Json>
  std::string render_impl(const Json& messages, const Json& context) const;

  std::string source_;
  std::string origin_;
  jinja::Template template_;
  ChatContentFormat content_format_;
};

}  // namespace vlm

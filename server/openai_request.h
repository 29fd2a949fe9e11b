// OpenAI request bodies -> native requests. JSON stays in server/ (DESIGN.md, principle 2).
// Field rules follow vLLM's OpenAI server: unknown fields are ignored; a field of the wrong type
// or out of range is a 400 naming it; `stream_options` without `stream` is a 400.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/sampling/sampling_params.h"
#include "engine/structured/constraint_cache.h"
#include "kernels/kv_compression/look_m_params.h"
#include "server/tool_calls.h"

namespace vlm {

enum class ApiKind { Chat, Completion };

// Defaults from the checkpoint's generation_config.json (fields it sets), applied where the
// request leaves a field out, as vLLM does with --generation-config auto.
struct SamplingDefaults {
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int> top_k;
  // Reads DIR/generation_config.json; a missing file gives no defaults. Throws LoadError for
  // an unreadable or invalid file.
  static SamplingDefaults load(const std::string& model_dir);
};

// A prompt of /v1/completions: text, or token ids.
struct CompletionPrompt {
  std::optional<std::string> text;
  std::vector<int32_t> ids;
};

struct ApiRequest {
  ApiKind kind = ApiKind::Chat;
  std::string model;  // may be empty: the served model
  bool stream = false;
  bool include_usage = false;       // stream_options.include_usage
  SamplingParams params;
  // Chat
  nlohmann::ordered_json messages;  // validated: array of {role, content} (key order kept for tojson)
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  bool chat_logprobs = false;       // chat: logprobs (bool) with top_logprobs
  // Completions
  std::vector<CompletionPrompt> prompts;
  bool echo = false;
  std::string suffix;
  // Both kinds
  bool return_token_ids = false;    // vLLM extension: token ids in the response
  std::optional<LookMSetting> look_m;  // vlm_options.look_m (server/look_m_option.h)
  std::string cache_salt;              // vLLM: requests share cached prefixes only with the same salt
  // Structured output: response_format (json_object, json_schema) or vLLM's structured_outputs
  // (json, regex, choice, grammar, json_object); the ApiServer compiles it (param: the field
  // named in its errors). Chat: tools and tool_choice (a required / named choice sets the
  // constraint from the tools' parameters).
  std::optional<structured::ConstraintSpec> constraint;
  std::string constraint_param;
  ToolSettings tools;
};

// Parses and validates a request body. Throws RequestError(400, "invalid_request_error",
// message, param) for invalid JSON, a wrong type, or an out-of-range value.
ApiRequest parse_api_request(ApiKind kind, std::string_view body, const SamplingDefaults& defaults);

// A request body that must be one JSON object (every endpoint's). Throws RequestError(400,
// "invalid_request_error") for invalid JSON or another JSON type.
nlohmann::ordered_json parse_json_object(std::string_view body);

}  // namespace vlm

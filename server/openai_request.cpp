#include "server/openai_request.h"

#include <cmath>
#include <fstream>

#include "kernels/core/check.h"
#include "server/chat_messages.h"
#include "server/look_m_option.h"

namespace vlm {
namespace {

using json = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw RequestError(400, "invalid_request_error", message, param);
}

// Typed optional getters: absent or null -> nullopt; wrong type -> 400 naming the field.
std::optional<double> get_number(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) bad(key, std::string("'") + key + "' must be a number");
  const double v = it->get<double>();
  if (!std::isfinite(v)) bad(key, std::string("'") + key + "' must be finite");
  return v;
}

std::optional<int64_t> get_int(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (it->is_number_float()) {
    const double d = it->get<double>();
    if (d != std::floor(d)) bad(key, std::string("'") + key + "' must be an integer");
    if (!(d >= -9.2e18 && d <= 9.2e18)) bad(key, std::string("'") + key + "' is out of range");  // int64 holds it
    return static_cast<int64_t>(d);
  }
  if (!it->is_number_integer()) bad(key, std::string("'") + key + "' must be an integer");
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    bad(key, std::string("'") + key + "' is out of range");
  return it->get<int64_t>();
}

std::optional<bool> get_bool(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) bad(key, std::string("'") + key + "' must be a boolean");
  return it->get<bool>();
}

std::optional<std::string> get_string(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) bad(key, std::string("'") + key + "' must be a string");
  return it->get<std::string>();
}

int checked_int(const json& j, const char* key, int64_t lo, int64_t hi, int64_t fallback) {
  const int64_t v = get_int(j, key).value_or(fallback);
  if (v < lo || v > hi)
    bad(key, std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(v));
  return static_cast<int>(v);
}

std::vector<int32_t> token_ids(const json& arr, const std::string& param) {
  std::vector<int32_t> ids;
  for (const auto& v : arr) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      bad(param, "'" + param + "' must hold non-negative token ids");
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

// Extension: "sparse_prefill": "off"|"a_shape"|"tri_shape"|"vertical_slash"|"grid"|"xattention"|"mminference" at the top level or
// inside "vlm_options"; overrides the server's sparse-prefill method for this request.
void parse_sparse_prefill(const json& j, SamplingParams& p) {
  const json* v = nullptr;
  if (auto it = j.find("sparse_prefill"); it != j.end() && !it->is_null()) v = &*it;
  if (auto o = j.find("vlm_options"); o != j.end() && !o->is_null()) {
    if (!o->is_object()) bad("vlm_options", "'vlm_options' must be an object");
    if (auto it = o->find("sparse_prefill"); it != o->end() && !it->is_null()) v = &*it;
  }
  if (!v) return;
  const auto m = v->is_string() ? parse_sparse_prefill_method(v->get<std::string>()) : std::nullopt;
  if (!m) bad("sparse_prefill", "'sparse_prefill' must be one of \"off\", \"a_shape\", \"tri_shape\", \"vertical_slash\", \"grid\", \"xattention\", \"mminference\"");
  p.sparse_prefill = *m;
}

void parse_sampling(const json& j, const SamplingDefaults& d, ApiKind kind, ApiRequest& r) {
  SamplingParams& p = r.params;
  p.n = checked_int(j, "n", 1, 128, 1);
  p.temperature = static_cast<float>(get_number(j, "temperature").value_or(d.temperature.value_or(1.0)));
  p.top_p = static_cast<float>(get_number(j, "top_p").value_or(d.top_p.value_or(1.0)));
  p.top_k = static_cast<int>(get_int(j, "top_k").value_or(d.top_k.value_or(0)));
  p.min_p = static_cast<float>(get_number(j, "min_p").value_or(d.min_p.value_or(0.0)));
  p.repetition_penalty = static_cast<float>(get_number(j, "repetition_penalty").value_or(d.repetition_penalty.value_or(1.0)));
  p.presence_penalty = static_cast<float>(get_number(j, "presence_penalty").value_or(0.0));
  p.frequency_penalty = static_cast<float>(get_number(j, "frequency_penalty").value_or(0.0));
  if (auto seed = get_int(j, "seed")) p.seed = static_cast<uint64_t>(*seed);
  std::optional<int64_t> max_tokens = get_int(j, "max_tokens");
  const char* max_field = "max_tokens";
  if (kind == ApiKind::Chat) {
    if (auto mct = get_int(j, "max_completion_tokens")) {
      max_tokens = mct;
      max_field = "max_completion_tokens";
    }
  }
  if (max_tokens) {
    if (*max_tokens < 1 || *max_tokens > INT32_MAX)
      bad(max_field, std::string("'") + max_field + "' must be at least 1, got " + std::to_string(*max_tokens));
    p.max_tokens = static_cast<int>(*max_tokens);
  }
  p.min_tokens = checked_int(j, "min_tokens", 0, INT32_MAX, 0);
  p.ignore_eos = get_bool(j, "ignore_eos").value_or(false);
  p.skip_special_tokens = get_bool(j, "skip_special_tokens").value_or(true);
  p.include_stop_str_in_output = get_bool(j, "include_stop_str_in_output").value_or(false);
  // Extension: SinkRouter on/off for this request, as "vlm_options": {"sink_router": bool} (with
  // the other per-request method switches) or a top-level "sink_router".
  p.sink_router = get_bool(j, "sink_router");
  if (auto o = j.find("vlm_options"); o != j.end() && o->is_object() && o->contains("sink_router")) {
    if (!(*o)["sink_router"].is_boolean())
      bad("vlm_options.sink_router", "'vlm_options.sink_router' must be a boolean");
    p.sink_router = (*o)["sink_router"].get<bool>();
  }
  if (auto it = j.find("stop"); it != j.end() && !it->is_null()) {
    if (it->is_string()) {
      p.stop.push_back(it->get<std::string>());
    } else if (it->is_array()) {
      for (const auto& s : *it) {
        if (!s.is_string()) bad("stop", "'stop' must be a string or a list of strings");
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      bad("stop", "'stop' must be a string or a list of strings");
    }
    for (const auto& s : p.stop)
      if (s.empty()) bad("stop", "'stop' strings must not be empty");
  }
  if (auto it = j.find("stop_token_ids"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) bad("stop_token_ids", "'stop_token_ids' must be a list of token ids");
    p.stop_token_ids = token_ids(*it, "stop_token_ids");
  }
  parse_sparse_prefill(j, p);
  if (kind == ApiKind::Chat) {
    r.chat_logprobs = get_bool(j, "logprobs").value_or(false);
    const int top = checked_int(j, "top_logprobs", 0, 20, 0);
    if (top > 0 && !r.chat_logprobs) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (r.chat_logprobs) p.logprobs = top;
  } else {
    auto it = j.find("logprobs");
    if (it != j.end() && !it->is_null()) {
      if (it->is_boolean()) bad("logprobs", "'logprobs' must be an integer for completions");
      p.logprobs = checked_int(j, "logprobs", 0, 20, 0);
    }
  }
}

void parse_messages(const json& j, ApiRequest& r) {
  auto it = j.find("messages");
  if (it == j.end()) bad("messages", "'messages' is required");
  if (!it->is_array() || it->empty()) bad("messages", "'messages' must be a non-empty list");
  json messages = *it;  // canonical parts (server/chat_messages.h)
  for (size_t i = 0; i < messages.size(); ++i) {
    json& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad(where, where + " must be an object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) bad(where + ".role", where + ".role must be a string");
    const std::string rs = role->get<std::string>();
    if (rs != "system" && rs != "user" && rs != "assistant" && rs != "tool" && rs != "developer")
      bad(where + ".role", "unknown role '" + rs + "' in " + where);
    validate_message_fields(m, where);
    // Null or missing content is no parts, for every role (as vLLM).
    auto content = m.find("content");
    if (content == m.end() || content->is_null() || content->is_string()) continue;
    if (!content->is_array()) bad(where + ".content", where + ".content must be a string, a list of parts or null");
    json parts = json::array();
    for (size_t k = 0; k < content->size(); ++k) {
      const std::string pw = where + ".content[" + std::to_string(k) + "]";
      std::optional<json> canonical = canonical_content_part((*content)[k], pw);
      if (!canonical) continue;  // a text part without text (vLLM skips it)
      const json& part = parts.emplace_back(std::move(*canonical));
      const std::string type = part["type"].get<std::string>();
      if (type == "text") {
        continue;
      } else if (type == "image_url") {
        const json& u = part.contains(type) ? part[type] : json();
        const bool ok = u.is_string() || (u.is_object() && u.contains("url") && u["url"].is_string());
        if (!ok) bad(pw + "." + type, pw + "." + type + " must be a URL string or {\"url\": ...}");
      } else if (type == "video_url" || type == "video") {
        // video_url: a URL, a list of frame URLs, or {"url": either, "fps": F}; video (Qwen's
        // format): a URL or a list of frame URLs. fps may also sit on the part.
        auto url_or_list = [](const json& v) {
          if (v.is_string()) return true;
          if (!v.is_array() || v.empty()) return false;
          for (const json& e : v)
            if (!e.is_string()) return false;
          return true;
        };
        const json& u = part.contains(type) ? part[type] : json();
        const bool ok = url_or_list(u) || (type == "video_url" && u.is_object() && u.contains("url") && url_or_list(u["url"]));
        if (!ok)
          bad(pw + "." + type, pw + "." + type + (type == "video" ? " must be a URL string or a non-empty list of frame URLs"
                                                                   : " must be a URL string, a non-empty list of frame "
                                                                     "URLs, or {\"url\": ..., \"fps\": ...}"));
        bool has_fps = false, has_num_frames = false;
        for (const json* holder : {&part, &u}) {
          if (!holder->is_object()) continue;
          if (holder->contains("fps")) {
            const json& f = (*holder)["fps"];
            if (!f.is_number() || !(f.get<double>() > 0) || f.get<double>() > 1000)
              bad(pw + ".fps", pw + ": fps must be a number in (0, 1000]");
            has_fps = true;
          }
          // Video files: vLLM's num_frames, Qwen's min_frames / max_frames.
          for (const char* key : {"num_frames", "min_frames", "max_frames"}) {
            if (!holder->contains(key)) continue;
            const json& n = (*holder)[key];
            if (!n.is_number_integer() || n.get<int64_t>() < 1 || n.get<int64_t>() > 100000)
              bad(pw + "." + key, pw + ": " + key + " must be an integer in [1, 100000]");
            has_num_frames = has_num_frames || std::string(key) == "num_frames";
          }
        }
        if (has_fps && has_num_frames) bad(pw + ".num_frames", pw + ": give fps or num_frames, not both");
      }
    }
    *content = std::move(parts);
  }
  r.messages = std::move(messages);
}

void parse_prompts(const json& j, ApiRequest& r) {
  auto it = j.find("prompt");
  if (it == j.end() || it->is_null()) bad("prompt", "'prompt' is required");
  const json& p = *it;
  if (p.is_string()) {
    r.prompts.push_back({p.get<std::string>(), {}});
  } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
    r.prompts.push_back({std::nullopt, token_ids(p, "prompt")});
  } else if (p.is_array() && !p.empty()) {
    for (const auto& e : p) {
      if (e.is_string()) r.prompts.push_back({e.get<std::string>(), {}});
      else if (e.is_array() && !e.empty()) r.prompts.push_back({std::nullopt, token_ids(e, "prompt")});
      else bad("prompt", "'prompt' must be a string, a list of strings, token ids, or a list of token-id lists");
    }
  } else {
    bad("prompt", "'prompt' must be a non-empty string, list of strings, or token ids");
  }
  for (const auto& cp : r.prompts)
    if (cp.text && cp.text->empty()) bad("prompt", "'prompt' must not be empty");
  if (r.prompts.size() > 64) bad("prompt", "at most 64 prompts per request");
}

// OpenAI logit_bias: {"token id": bias}.
void parse_logit_bias(const json& j, SamplingParams& p) {
  auto it = j.find("logit_bias");
  if (it == j.end() || it->is_null()) return;
  if (!it->is_object()) bad("logit_bias", "'logit_bias' must be an object of token id -> bias");
  for (const auto& [k, v] : it->items()) {
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(k, &used);
    } catch (const std::exception&) {
    }
    if (used != k.size() || id < 0 || id > INT32_MAX) bad("logit_bias", "'logit_bias' keys must be token ids, got '" + k + "'");
    if (!v.is_number()) bad("logit_bias", "'logit_bias' values must be numbers");
    p.logit_bias.push_back({static_cast<int32_t>(id), v.get<float>()});
  }
}

using Kind = structured::ConstraintSpec::Kind;

// A schema given as an object or as JSON text.
std::string schema_text(const json& v, const std::string& param) {
  if (v.is_object() || v.is_boolean()) return v.dump();
  if (v.is_string()) {
    try {
      return json::parse(v.get<std::string>()).dump();
    } catch (const json::exception&) {
    }
  }
  bad(param, "'" + param + "' must be a JSON Schema object");
}

// response_format (OpenAI; llama.cpp's {"type": "json_object", "schema": ...} too).
void parse_response_format(const json& j, ApiRequest& r) {
  auto it = j.find("response_format");
  if (it == j.end() || it->is_null()) return;
  if (!it->is_object() || !it->contains("type") || !(*it)["type"].is_string())
    bad("response_format", "'response_format' must be an object with a 'type'");
  const std::string type = (*it)["type"].get<std::string>();
  r.constraint_param = "response_format";
  if (type == "text") return;
  if (type == "json_object") {
    if (it->contains("schema")) r.constraint = structured::ConstraintSpec{Kind::JsonSchema, schema_text((*it)["schema"], "response_format.schema"), {}};
    else r.constraint = structured::ConstraintSpec{Kind::JsonObject, "", {}};
  } else if (type == "json_schema") {
    auto js = it->find("json_schema");
    if (js == it->end() || !js->is_object()) bad("response_format.json_schema", "'response_format.json_schema' is required for type json_schema");
    auto schema = js->find("schema");
    if (schema == js->end()) bad("response_format.json_schema.schema", "'response_format.json_schema.schema' is required");
    r.constraint = structured::ConstraintSpec{Kind::JsonSchema, schema_text(*schema, "response_format.json_schema.schema"), {}};
  } else {
    bad("response_format.type", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", got '" + type + "'");
  }
}

// vLLM's structured_outputs {json | regex | choice | grammar | json_object}, and its older
// top-level guided_json / guided_regex / guided_choice / guided_grammar.
void parse_structured_outputs(const json& j, ApiRequest& r) {
  json so = json::object();
  if (auto it = j.find("structured_outputs"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) bad("structured_outputs", "'structured_outputs' must be an object");
    so = *it;
  }
  for (const char* k : {"json", "regex", "choice", "grammar"})
    if (auto it = j.find(std::string("guided_") + k); it != j.end() && !it->is_null()) so[k] = *it;
  std::vector<std::string> kinds;
  for (const auto& [k, v] : so.items()) {
    if (v.is_null() || (k == "json_object" && v == false)) continue;
    if (k == "json" || k == "regex" || k == "choice" || k == "grammar" || k == "json_object") kinds.push_back(k);
    else if (k != "disable_fallback" && k != "disable_any_whitespace" && k != "disable_additional_properties" && k != "whitespace_pattern")
      bad("structured_outputs." + k, "'structured_outputs." + k + "' is not supported");
  }
  if (kinds.empty()) return;
  if (kinds.size() > 1) bad("structured_outputs", "only one kind of structured output is allowed per request");
  if (r.constraint) bad("structured_outputs", "give either 'response_format' or 'structured_outputs', not both");
  const std::string k = kinds[0];
  const json& v = so[k];
  r.constraint_param = "structured_outputs." + k;
  if (k == "json") {
    r.constraint = structured::ConstraintSpec{Kind::JsonSchema, schema_text(v, r.constraint_param), {}};
  } else if (k == "json_object") {
    r.constraint = structured::ConstraintSpec{Kind::JsonObject, "", {}};
  } else if (k == "choice") {
    structured::ConstraintSpec spec{Kind::Choice, "", {}};
    if (!v.is_array() || v.empty()) bad(r.constraint_param, "'" + r.constraint_param + "' must be a non-empty list of strings");
    for (const auto& c : v) {
      if (!c.is_string()) bad(r.constraint_param, "'" + r.constraint_param + "' must be a non-empty list of strings");
      spec.choices.push_back(c.get<std::string>());
    }
    r.constraint = spec;
  } else {
    if (!v.is_string()) bad(r.constraint_param, "'" + r.constraint_param + "' must be a string");
    r.constraint = structured::ConstraintSpec{k == "regex" ? Kind::Regex : Kind::Grammar, v.get<std::string>(), {}};
  }
}

}  // namespace

SamplingDefaults SamplingDefaults::load(const std::string& model_dir) {
  SamplingDefaults d;
  const std::string path = model_dir + "/generation_config.json";
  std::ifstream in(path);
  if (!in) return d;
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw LoadError(path + ": invalid JSON: " + e.what());
  }
  auto num = [&](const char* k) -> std::optional<double> {
    return j.contains(k) && j[k].is_number() ? std::optional<double>(j[k].get<double>()) : std::nullopt;
  };
  // transformers only samples when do_sample is true; greedy otherwise (vLLM reads the values
  // regardless; we follow vLLM).
  if (auto v = num("temperature")) d.temperature = static_cast<float>(*v);
  if (auto v = num("top_p")) d.top_p = static_cast<float>(*v);
  if (auto v = num("min_p")) d.min_p = static_cast<float>(*v);
  if (auto v = num("repetition_penalty")) d.repetition_penalty = static_cast<float>(*v);
  if (auto v = num("top_k")) d.top_k = static_cast<int>(*v);
  return d;
}

json parse_json_object(std::string_view body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception&) {
    bad("", "request body is not valid JSON");
  }
  if (!j.is_object()) bad("", "request body must be a JSON object");
  return j;
}

ApiRequest parse_api_request(ApiKind kind, std::string_view body, const SamplingDefaults& defaults) {
  const json j = parse_json_object(body);
  ApiRequest r;
  r.kind = kind;
  r.model = get_string(j, "model").value_or("");
  r.stream = get_bool(j, "stream").value_or(false);
  if (auto it = j.find("stream_options"); it != j.end() && !it->is_null()) {
    if (!r.stream) bad("stream_options", "'stream_options' is only allowed with 'stream': true");
    if (!it->is_object()) bad("stream_options", "'stream_options' must be an object");
    r.include_usage = get_bool(*it, "include_usage").value_or(false);
  }
  parse_sampling(j, defaults, kind, r);
  r.look_m = parse_look_m_option(j);
  if (auto it = j.find("cache_salt"); it != j.end() && !it->is_null()) {  // vLLM's prefix-cache isolation
    if (!it->is_string() || it->get<std::string>().empty())
      bad("cache_salt", "'cache_salt' must be a non-empty string if provided");
    r.cache_salt = it->get<std::string>();
  }
  if (kind == ApiKind::Chat) {
    parse_messages(j, r);
    r.add_generation_prompt = get_bool(j, "add_generation_prompt").value_or(true);
    r.continue_final_message = get_bool(j, "continue_final_message").value_or(false);
    if (r.add_generation_prompt && r.continue_final_message)
      bad("continue_final_message", "'continue_final_message' and 'add_generation_prompt' cannot both be true");
    if (auto it = j.find("chat_template_kwargs"); it != j.end() && !it->is_null()) {
      if (!it->is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
      r.chat_template_kwargs = *it;
    }
  } else {
    parse_prompts(j, r);
    r.echo = get_bool(j, "echo").value_or(false);
    r.suffix = get_string(j, "suffix").value_or("");
    if (!r.suffix.empty()) bad("suffix", "'suffix' is not supported");
  }
  r.return_token_ids = get_bool(j, "return_token_ids").value_or(false);
  parse_logit_bias(j, r.params);
  parse_response_format(j, r);
  parse_structured_outputs(j, r);
  if (kind == ApiKind::Chat) {
    r.tools = parse_tool_settings(j);
    if (auto tc = tool_constraint(r.tools)) {
      if (r.constraint)
        bad("tool_choice", "tool_choice \"required\" or a named function cannot be combined with another structured output");
      r.constraint = *tc;
      r.constraint_param = "tools";
    }
  }
  if (r.stream && r.params.n > 1 && r.kind == ApiKind::Completion && r.prompts.size() > 1)
    bad("n", "streaming several prompts with n > 1 is not supported");
  return r;
}

}  // namespace vlm

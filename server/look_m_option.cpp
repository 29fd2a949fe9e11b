#include "server/look_m_option.h"

#include <cmath>
#include <string>

#include "kernels/core/check.h"

namespace vlm {

namespace {

constexpr const char* kParam = "vlm_options.look_m";

[[noreturn]] void bad(const std::string& message) {
  throw RequestError(400, "invalid_request_error", std::string("'") + kParam + "': " + message, kParam);
}

LookMSetting from_mode(const std::string& mode, LookMParams base) {
  LookMSetting s;
  if (mode == "off") return s;
  auto p = look_m_mode_from_name(mode, base);
  if (!p) bad("unknown mode '" + mode + "'");
  s.enabled = true;
  s.params = *p;
  return s;
}

}  // namespace

std::optional<LookMSetting> parse_look_m_option(const nlohmann::ordered_json& body) {
  auto opts = body.find("vlm_options");
  if (opts == body.end() || opts->is_null()) return std::nullopt;
  if (!opts->is_object()) throw RequestError(400, "invalid_request_error", "'vlm_options' must be an object", "vlm_options");
  auto it = opts->find("look_m");
  if (it == opts->end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return from_mode(it->get<std::string>(), {});
  if (!it->is_object()) bad("must be a mode name or an object");
  const auto& o = *it;
  LookMParams p;
  auto number = [&](const char* key, double& dst) {
    if (auto f = o.find(key); f != o.end() && !f->is_null()) {
      if (!f->is_number()) bad(std::string(key) + " must be a number");
      dst = f->get<double>();
    }
  };
  auto integer = [&](const char* key, int32_t& dst) {
    if (auto f = o.find(key); f != o.end() && !f->is_null()) {
      if (!f->is_number_integer() || f->get<int64_t>() < 0 || f->get<int64_t>() > INT32_MAX)
        bad(std::string(key) + " must be a non-negative integer");
      dst = static_cast<int32_t>(f->get<int64_t>());
    }
  };
  number("recent_ratio", p.recent_ratio);
  number("important_ratio", p.important_ratio);
  integer("recent_tokens", p.recent_tokens);
  integer("important_tokens", p.important_tokens);
  integer("window", p.window);
  if (auto f = o.find("scores"); f != o.end() && !f->is_null()) {
    auto s = f->is_string() ? look_m_scores_from_name(f->get<std::string>()) : std::nullopt;
    if (!s) bad("scores must be \"window\" or \"full\"");
    p.scores = *s;
  }
  if (auto f = o.find("text_only_prompts"); f != o.end() && !f->is_null()) {
    if (!f->is_boolean()) bad("text_only_prompts must be a boolean");
    p.text_only_prompts = f->get<bool>();
  }
  std::string mode = "text-prior-pivot";
  if (auto f = o.find("mode"); f != o.end() && !f->is_null()) {
    if (!f->is_string()) bad("mode must be a string");
    mode = f->get<std::string>();
  }
  if (const std::string e = look_m_params_error(p); !e.empty()) bad(e);
  return from_mode(mode, p);
}

}  // namespace vlm

#include "kernels/kv_compression/look_m_params.h"

#include <cmath>

#include <fmt/format.h>

#include "kernels/core/check.h"

namespace vlm {

std::optional<LookMParams> look_m_mode_from_name(std::string_view name, LookMParams base) {
  std::string_view rest = name;
  base.text_prior = rest.starts_with("text-prior-");
  if (base.text_prior) rest.remove_prefix(11);
  if (rest == "pivot") base.merge = KVMerge::Pivot;
  else if (rest == "avg") base.merge = KVMerge::Average;
  else if (rest == "weighted") base.merge = KVMerge::Weighted;
  else if (rest == "h2o") base.merge = KVMerge::None;
  else return std::nullopt;
  return base;
}

std::string look_m_mode_name(const LookMParams& p) {
  const char* m = p.merge == KVMerge::Pivot ? "pivot"
                  : p.merge == KVMerge::Average ? "avg"
                  : p.merge == KVMerge::Weighted ? "weighted"
                                                 : "h2o";
  return std::string(p.text_prior ? "text-prior-" : "") + m;
}

std::optional<LookMScores> look_m_scores_from_name(std::string_view name) {
  if (name == "full") return LookMScores::Full;
  if (name == "window") return LookMScores::Window;
  return std::nullopt;
}

const char* look_m_scores_name(LookMScores s) { return s == LookMScores::Full ? "full" : "window"; }

std::string look_m_params_error(const LookMParams& p) {
  if (!(p.recent_ratio >= 0 && p.recent_ratio <= 1)) return fmt::format("recent_ratio {} outside [0, 1]", p.recent_ratio);
  if (!(p.important_ratio >= 0 && p.important_ratio <= 1))
    return fmt::format("important_ratio {} outside [0, 1]", p.important_ratio);
  if (p.recent_tokens < -1) return fmt::format("recent_tokens {} < 0", p.recent_tokens);
  if (p.important_tokens < -1) return fmt::format("important_tokens {} < 0", p.important_tokens);
  if (p.window < 1) return fmt::format("window {} < 1", p.window);
  if (p.num_sink_tokens < 0) return fmt::format("num_sink_tokens {} < 0", p.num_sink_tokens);
  return {};
}

void validate(const LookMParams& p) {
  const std::string e = look_m_params_error(p);
  VLM_CHECK(e.empty(), "LOOK-M params: {}", e);
}

LookMBudget look_m_budget(const LookMParams& p, int32_t L) {
  LookMBudget b;
  b.recent = p.recent_tokens >= 0 ? p.recent_tokens : static_cast<int32_t>(std::floor(p.recent_ratio * L));
  b.important = p.important_tokens >= 0 ? p.important_tokens : static_cast<int32_t>(std::floor(p.important_ratio * L));
  return b;
}

}  // namespace vlm

// LOOK-M (arXiv 2406.18139) settings: which eviction/merge mode, how big the kept cache is, and
// how importance scores are measured. Shared by the kernels (kv_compression/), the model's
// attention layer (which runs them at the end of prefill) and the engine (server flags, request
// overrides).
//
// Budget for a cache of L tokens: recent window M = floor(recent_ratio * L) (or recent_tokens
// when >= 0), important N = floor(important_ratio * L) (or important_tokens when >= 0); the
// kept cache is exactly N + M tokens. When L <= N + M nothing is compressed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace vlm {

// How evicted KV pairs are folded into the kept ones (cosine similarity on keys; the same
// assignment applies to values). None: plain eviction (H2O).
enum class KVMerge : uint8_t { None, Average, Pivot, Weighted };

// Where the importance score (column sums of softmax attention) comes from.
//  Full:   every prompt query row (the reference's H2O accumulation; accumulated per prefill
//          chunk, exact under chunking; costs about one more attention pass).
//  Window: the last `window` prompt query rows (of the final prefill chunk; when that chunk is
//          shorter, all its rows). Cheap.
enum class LookMScores : uint8_t { Full, Window };

struct LookMParams {
  bool text_prior = true;            // text tokens rank above every image/video token (eq. 5)
  KVMerge merge = KVMerge::Pivot;
  double recent_ratio = 0.1;         // alpha1: recent window M / L
  double important_ratio = 0.1;      // alpha2: important tokens N / L
  int32_t recent_tokens = -1;        // absolute M when >= 0 (overrides the ratio)
  int32_t important_tokens = -1;     // absolute N when >= 0 (overrides the ratio)
  LookMScores scores = LookMScores::Window;
  int32_t window = 64;               // W for LookMScores::Window (>= 1)
  // Non-text-prior modes always keep this many leading tokens (attention sinks), as the
  // reference does (score = +inf for tokens 0..3).
  int32_t num_sink_tokens = 4;
  // Compress prompts without any image/video token too (default: only prompts with media).
  bool text_only_prompts = false;

  bool operator==(const LookMParams&) const = default;
};

// Mode names of the --look-m flag: "text-prior-pivot" (default mode), "text-prior-avg",
// "text-prior-weighted", "text-prior-h2o", "pivot", "avg", "weighted", "h2o". std::nullopt for an
// unknown name ("off" is the caller's business).
std::optional<LookMParams> look_m_mode_from_name(std::string_view name, LookMParams base = {});
std::string look_m_mode_name(const LookMParams& p);
std::optional<LookMScores> look_m_scores_from_name(std::string_view name);  // "full", "window"
const char* look_m_scores_name(LookMScores s);

// Throws InternalError naming the field for out-of-range settings (ratios in [0, 1], window >= 1,
// sinks >= 0). Callers with user input check first and report a request error.
void validate(const LookMParams& p);
// Describes what is wrong with p, or an empty string (for request validation).
std::string look_m_params_error(const LookMParams& p);

// LOOK-M on or off with its settings: the server-wide default (EngineConfig) and a request's
// override.
struct LookMSetting {
  bool enabled = false;
  LookMParams params;
  bool operator==(const LookMSetting&) const = default;
};

struct LookMBudget {
  int32_t recent = 0;     // M
  int32_t important = 0;  // N
  int32_t kept() const { return recent + important; }
};
// The budget for a cache of L tokens; kept() may be >= L (then nothing is compressed).
LookMBudget look_m_budget(const LookMParams& p, int32_t L);

}  // namespace vlm

// The per-request LOOK-M override, a vlm-server extension field of both APIs:
//   "vlm_options": {"look_m": "off" | "<mode>" | {"mode": "off" | "<mode>", "recent_ratio": x,
//                   "important_ratio": x, "recent_tokens": n, "important_tokens": n,
//                   "scores": "window" | "full", "window": n, "text_only_prompts": bool}}
// <mode>: text-prior-pivot (default), text-prior-avg, text-prior-weighted, text-prior-h2o, pivot,
// avg, weighted, h2o. Unset fields take LookMParams' defaults.
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "kernels/kv_compression/look_m_params.h"

namespace vlm {

// body: the request object. nullopt when it has no vlm_options.look_m. Throws
// RequestError(400, "invalid_request_error", ..., "vlm_options.look_m") for a bad value.
std::optional<LookMSetting> parse_look_m_option(const nlohmann::ordered_json& body);

}  // namespace vlm

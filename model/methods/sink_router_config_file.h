// The SinkRouter config file (vlm-server --sink-router-config FILE; written by
// vlm-calibrate-sink as configs/<model>/sink_router.json): a JSON object
//   {
//     "aggregation": "min" | "mean" | "max",      (optional, default "min")
//     "surrogate": "zero" | "anchor_value",        (optional, default "zero")
//     "num_dense_layers": 2,                       (optional, default 2; layers never routed)
//     "coefficients": [c0, c1, c2, c3],            (required; 1 to 4 numbers, missing ones 0)
//     "length_ref": 4096,                          (optional, default 32768; tokens, > 0)
//     "tau_min": 0.1, "tau_max": 0.3,              (optional, defaults -1 and 1.01)
//     "model": "...", "calibration": {...}, "comment": "..."   (informational, not read)
//   }
// giving tau(L) = clamp(c0 + c1 x + c2 x^2 + c3 x^3, tau_min, tau_max), x = L / length_ref
// (SinkRouterConfig). Any other key is an error (a typo must not silently fall back).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "kernels/sink_router/sink_router_config.h"

namespace vlm {

// Throws LoadError "PATH: ..." naming the key for a missing file, invalid JSON, an unknown key,
// a value of the wrong type or out of range (length_ref <= 0, tau_min > tau_max,
// num_dense_layers < 0, a non-finite coefficient).
SinkRouterConfig load_sink_router_config(const std::string& path);
// The same from a parsed object; `where` names the source in errors.
SinkRouterConfig sink_router_config_from_json(const nlohmann::json& j, const std::string& where);
// The config's keys (no "model"/"calibration"); round-trips through sink_router_config_from_json.
nlohmann::json sink_router_config_to_json(const SinkRouterConfig& c);

}  // namespace vlm

#include "model/methods/sink_router_config_file.h"

#include <cmath>
#include <set>

#include "model/decoder/json_file.h"

namespace vlm {
namespace {

[[noreturn]] void fail(const std::string& where, const std::string& what) { throw LoadError(where + ": " + what); }

double number(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto& v = j.at(key);
  if (!v.is_number()) fail(where, fmt::format("\"{}\" must be a number, got {}", key, v.dump()));
  const double x = v.get<double>();
  if (!std::isfinite(x)) fail(where, fmt::format("\"{}\" must be finite", key));
  return x;
}

}  // namespace

SinkRouterConfig sink_router_config_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) fail(where, "a SinkRouter config must be a JSON object");
  static const std::set<std::string> known = {"aggregation", "surrogate", "num_dense_layers", "coefficients",
                                              "length_ref",  "tau_min",   "tau_max",          "model",
                                              "calibration", "comment"};
  for (const auto& [k, v] : j.items())
    if (!known.count(k)) fail(where, fmt::format("unknown key \"{}\"", k));
  SinkRouterConfig c;
  if (j.contains("aggregation")) {
    const auto& v = j["aggregation"];
    if (!v.is_string() || !parse_sink_aggregation(v.get<std::string>(), &c.aggregation))
      fail(where, fmt::format("\"aggregation\" must be \"min\", \"mean\" or \"max\", got {}", v.dump()));
  }
  if (j.contains("surrogate")) {
    const auto& v = j["surrogate"];
    if (!v.is_string() || !parse_sink_surrogate(v.get<std::string>(), &c.surrogate))
      fail(where, fmt::format("\"surrogate\" must be \"zero\" or \"anchor_value\", got {}", v.dump()));
  }
  if (j.contains("num_dense_layers")) {
    const auto& v = j["num_dense_layers"];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1 << 20)
      fail(where, fmt::format("\"num_dense_layers\" must be an integer >= 0, got {}", v.dump()));
    c.num_dense_layers = v.get<int>();
  }
  if (!j.contains("coefficients")) fail(where, "missing \"coefficients\" ([c0, c1, c2, c3] of tau(L))");
  const auto& co = j["coefficients"];
  if (!co.is_array() || co.empty() || co.size() > 4)
    fail(where, fmt::format("\"coefficients\" must be an array of 1 to 4 numbers, got {}", co.dump()));
  double* dst[4] = {&c.c0, &c.c1, &c.c2, &c.c3};
  for (size_t i = 0; i < 4; ++i) *dst[i] = 0.0;
  for (size_t i = 0; i < co.size(); ++i) {
    if (!co[i].is_number() || !std::isfinite(co[i].get<double>()))
      fail(where, fmt::format("\"coefficients\"[{}] must be a finite number, got {}", i, co[i].dump()));
    *dst[i] = co[i].get<double>();
  }
  if (j.contains("length_ref")) {
    c.length_ref = number(j, "length_ref", where);
    if (!(c.length_ref > 0)) fail(where, fmt::format("\"length_ref\" must be > 0, got {}", c.length_ref));
  }
  if (j.contains("tau_min")) c.tau_min = number(j, "tau_min", where);
  if (j.contains("tau_max")) c.tau_max = number(j, "tau_max", where);
  if (c.tau_min > c.tau_max) fail(where, fmt::format("\"tau_min\" {} > \"tau_max\" {}", c.tau_min, c.tau_max));
  return c;
}

SinkRouterConfig load_sink_router_config(const std::string& path) {
  return sink_router_config_from_json(read_json_file(path), path);
}

nlohmann::json sink_router_config_to_json(const SinkRouterConfig& c) {
  return {{"aggregation", sink_aggregation_name(c.aggregation)},
          {"surrogate", sink_surrogate_name(c.surrogate)},
          {"num_dense_layers", c.num_dense_layers},
          {"coefficients", {c.c0, c.c1, c.c2, c.c3}},
          {"length_ref", c.length_ref},
          {"tau_min", c.tau_min},
          {"tau_max", c.tau_max}};
}

}  // namespace vlm

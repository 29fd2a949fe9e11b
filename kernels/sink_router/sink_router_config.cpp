#include "kernels/sink_router/sink_router_config.h"

#include <algorithm>

#include "kernels/core/check.h"

namespace vlm {

const char* sink_aggregation_name(SinkAggregation a) {
  switch (a) {
    case SinkAggregation::Min: return "min";
    case SinkAggregation::Mean: return "mean";
    case SinkAggregation::Max: return "max";
  }
  return "?";
}

bool parse_sink_aggregation(std::string_view s, SinkAggregation* out) {
  for (SinkAggregation a : {SinkAggregation::Min, SinkAggregation::Mean, SinkAggregation::Max})
    if (s == sink_aggregation_name(a)) {
      *out = a;
      return true;
    }
  return false;
}

const char* sink_surrogate_name(SinkSurrogate s) {
  return s == SinkSurrogate::Zero ? "zero" : "anchor_value";
}

bool parse_sink_surrogate(std::string_view s, SinkSurrogate* out) {
  for (SinkSurrogate v : {SinkSurrogate::Zero, SinkSurrogate::AnchorValue})
    if (s == sink_surrogate_name(v)) {
      *out = v;
      return true;
    }
  return false;
}

double SinkRouterConfig::threshold(int64_t context_len) const {
  const double x = static_cast<double>(context_len) / length_ref;
  const double t = c0 + x * (c1 + x * (c2 + x * c3));
  return std::clamp(t, tau_min, tau_max);
}

void SinkRouterConfig::validate() const {
  VLM_CHECK(length_ref > 0, "sink_router length_ref {} <= 0", length_ref);
  VLM_CHECK(tau_min <= tau_max, "sink_router tau_min {} > tau_max {}", tau_min, tau_max);
  VLM_CHECK(num_dense_layers >= 0, "sink_router num_dense_layers {} < 0", num_dense_layers);
}

}  // namespace vlm

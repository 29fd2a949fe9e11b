// SinkRouterConfig: the knobs of SinkRouter decode routing (shared/ALGORITHMS.md §8, SinkRouter
// paper §4.2 and Appendices A-B), shared by the routing score, the model's attention layer and
// the engine's config.
//
// A decode row's KV group g (the G query heads sharing kv head g) is a *sink group* when its
// group score (eq. 12: min / mean / max over the group's heads of the cosine between the query
// head and the group's anchor key, eq. 11) exceeds tau(L) (eq. 13), where L is the sequence's
// cached context length and tau is a cubic in x = L / length_ref (Appendix A), clamped to
// [tau_min, tau_max]. Layers below num_dense_layers are never routed (Appendix B: the first two).
//
// The paper's fitted coefficients are not in its text (its threshold is calibrated per model
// and length); the defaults here are a constant placeholder tau = 0.5 and must be calibrated per
// model (vlm-calibrate-sink, issue 11 step 4).
#pragma once

#include <string_view>

namespace vlm {

enum class SinkAggregation { Min, Mean, Max };
enum class SinkSurrogate {
  Zero,         // the paper's eq. 14: a sink group's heads output 0
  AnchorValue,  // the first token's value (exact when all the softmax mass is on the anchor)
};

const char* sink_aggregation_name(SinkAggregation a);       // "min", "mean", "max"
bool parse_sink_aggregation(std::string_view s, SinkAggregation* out);
const char* sink_surrogate_name(SinkSurrogate s);           // "zero", "anchor_value"
bool parse_sink_surrogate(std::string_view s, SinkSurrogate* out);

struct SinkRouterConfig {
  SinkAggregation aggregation = SinkAggregation::Min;  // ALGORITHMS.md §8.3: skip only if all
                                                        // heads of the group route
  SinkSurrogate surrogate = SinkSurrogate::Zero;
  // tau(L) = clamp(c0 + c1 x + c2 x^2 + c3 x^3, tau_min, tau_max), x = L / length_ref.
  double c0 = 0.5, c1 = 0.0, c2 = 0.0, c3 = 0.0;
  double length_ref = 32768.0;  // tokens; > 0
  double tau_min = -1.0, tau_max = 1.01;  // tau > 1 never routes (cosines are <= 1)
  int num_dense_layers = 2;     // layers [0, num_dense_layers) always run dense attention

  // tau(L) for a context of L cached tokens.
  double threshold(int64_t context_len) const;
  bool routes_layer(int layer) const { return layer >= num_dense_layers; }
  // Throws InternalError (naming the field) for length_ref <= 0, tau_min > tau_max or
  // num_dense_layers < 0.
  void validate() const;
};

}  // namespace vlm

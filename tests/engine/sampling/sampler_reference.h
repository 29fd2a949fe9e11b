// Naive reference of the Sampler's semantics (engine/sampling/sampler.h), for tests: a dense copy
// of the row, the penalties, biases and masks written into it, whole-row passes, a full sort for
// top_k and top_p, each token's mass e^(l - max l) in double, and the same single uniform draw.
// No constraint (structured output) and no logprobs here.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "engine/sampling/sampler.h"

namespace vlm::testing {

inline int32_t reference_sample(const float* logits, int64_t V, const std::vector<int32_t>& eos, Sequence& seq) {
  const SamplingParams& p = seq.params;
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> l(logits, logits + V);
  if (p.repetition_penalty != 1.0f) {
    std::vector<bool> seen(static_cast<size_t>(V), false);
    for (int32_t t : seq.token_ids) seen[t] = true;
    for (int64_t t = 0; t < V; ++t)
      if (seen[t]) l[t] = l[t] > 0 ? l[t] / p.repetition_penalty : l[t] * p.repetition_penalty;
  }
  std::vector<int32_t> count(static_cast<size_t>(V), 0);
  for (int32_t t : seq.output_ids()) ++count[t];
  for (int64_t t = 0; t < V; ++t)
    if (count[t] > 0) l[t] -= p.frequency_penalty * static_cast<float>(count[t]) + p.presence_penalty;
  for (const auto& [t, b] : p.logit_bias) l[t] += b;
  if (seq.num_output_tokens() < p.min_tokens) {
    for (int32_t t : p.stop_token_ids) l[t] = ninf;
    if (!p.ignore_eos)
      for (int32_t t : eos) l[t] = ninf;
  }
  if (p.greedy()) return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());  // first max
  const float s = 1.0f / p.temperature;
  for (float& x : l) x *= s;
  const float m = *std::max_element(l.begin(), l.end());
  float cut = ninf;
  if (p.min_p > 0.0f) cut = m + std::log(p.min_p);
  if (p.top_k > 0 && p.top_k < V) {
    std::vector<float> sorted = l;
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    cut = std::max(cut, sorted[static_cast<size_t>(p.top_k - 1)]);
  }
  std::vector<double> mass(static_cast<size_t>(V), 0.0);
  double total = 0;
  for (int64_t i = 0; i < V; ++i)
    if (l[i] >= cut && l[i] != ninf) total += mass[i] = std::exp(static_cast<double>(l[i] - m));
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);  // id order
  if (p.top_p < 1.0f) {  // most likely first, lowest id on ties; keep while the mass before is < top_p
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return mass[a] > mass[b] || (mass[a] == mass[b] && a < b); });
    const double target = static_cast<double>(p.top_p) * total;
    double before = 0;
    size_t n = 0;
    while (n < order.size() && before < target) before += mass[order[n++]];
    order.resize(std::max<size_t>(n, 1));
    total = before;
  }
  const double u = uniform01(seq.rng) * total;
  double acc = 0;
  int32_t last = order.front();
  for (int32_t t : order) {
    if (mass[t] == 0) continue;
    acc += mass[t];
    last = t;
    if (u < acc) return t;
  }
  return last;
}

}  // namespace vlm::testing

#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernels/core/check.h"
#include "kernels/ops/ops.h"

namespace vlm {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int32_t argmax(const float* l, int64_t V) {
  int64_t best = 0;
  for (int64_t i = 1; i < V; ++i)
    if (l[i] > l[best]) best = i;
  return static_cast<int32_t>(best);
}
}  // namespace

Sampler::Sampler(int64_t vocab_size, std::vector<int32_t> eos_token_ids)
    : vocab_size_(vocab_size), eos_token_ids_(std::move(eos_token_ids)) {
  VLM_CHECK(vocab_size > 0, "vocab size {}", vocab_size);
  const auto V = static_cast<size_t>(vocab_size);
  work_.resize(V);
  counts_.assign(V, 0);
  seen_.assign(V, 0);
  probs_.resize(V);
  soft_.resize(V);
}

void Sampler::apply_penalties(const Sequence& seq, float* l) {
  const SamplingParams& p = seq.params;
  if (p.repetition_penalty != 1.0f) {
    for (int32_t t : seq.token_ids) seen_[t] = 1;
    for (int32_t t : seq.token_ids) {
      if (!seen_[t]) continue;
      seen_[t] = 0;
      l[t] = l[t] > 0 ? l[t] / p.repetition_penalty : l[t] * p.repetition_penalty;
    }
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    const auto out = seq.output_ids();
    for (int32_t t : out) ++counts_[t];
    for (int32_t t : out) {
      if (counts_[t] == 0) continue;
      l[t] -= p.frequency_penalty * static_cast<float>(counts_[t]) + p.presence_penalty;
      counts_[t] = 0;
    }
  }
}

int32_t Sampler::draw_all(std::mt19937_64& rng) {
  // Nothing cut (the server's default sampling): every token in id order with probability soft_[i]
  // (masked tokens have 0 and are never drawn), without a kept list. The total and the search go
  // by blocks: one pass of block sums (four partial sums each), then a scan of one block.
  const int64_t V = vocab_size_;
  const int64_t nb = (V + kDrawBlock - 1) / kDrawBlock;
  block_sums_.resize(static_cast<size_t>(nb));
  double total = 0;
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t e = std::min(V, (b + 1) * kDrawBlock);
    double s[4] = {0, 0, 0, 0};
    int64_t i = b * kDrawBlock;
    for (; i + 4 <= e; i += 4)
      for (int j = 0; j < 4; ++j) s[j] += soft_[i + j];
    for (; i < e; ++i) s[0] += soft_[i];
    block_sums_[b] = (s[0] + s[1]) + (s[2] + s[3]);
    total += block_sums_[b];
  }
  VLM_CHECK(total > 0, "no probability mass left");
  const double u = uniform01(rng) * total;
  double acc = 0;
  for (int64_t b = 0; b < nb; ++b) {
    if (u >= acc + block_sums_[b] && b + 1 < nb) {
      acc += block_sums_[b];
      continue;
    }
    // In this block (or, by rounding, just after it): scan token by token.
    for (int64_t i = b * kDrawBlock; i < V; ++i) {
      if (soft_[i] == 0.0f) continue;
      acc += soft_[i];
      if (u < acc) return static_cast<int32_t>(i);
    }
    break;
  }
  for (int64_t i = V - 1; i > 0; --i)  // u within rounding of the total: the last possible token
    if (soft_[i] > 0.0f) return static_cast<int32_t>(i);
  return 0;
}

int32_t Sampler::sample_random(float* l, const SamplingParams& p, std::mt19937_64& rng) {
  const int64_t V = vocab_size_;
  const float inv_t = 1.0f / p.temperature;
  for (int64_t i = 0; i < V; ++i) l[i] *= inv_t;
  const float m = l[argmax(l, V)];
  VLM_CHECK(m > kNegInf, "every token is masked");
  // min_p and top_k as one threshold on the scaled logits: keep l >= cut.
  float cut = kNegInf;
  if (p.min_p > 0.0f) cut = m + std::log(p.min_p);
  if (p.top_k > 0 && p.top_k < V) {
    kept_.resize(static_cast<size_t>(V));
    std::iota(kept_.begin(), kept_.end(), 0);
    std::nth_element(kept_.begin(), kept_.begin() + (p.top_k - 1), kept_.end(),
                     [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    cut = std::max(cut, l[kept_[p.top_k - 1]]);
  }
  // exp(l - m) of every token in one vectorized pass (softmax_rows: f32 exp, relative error
  // <= 1e-6, normalized by a sum taken in double; the common factor does not change the draw),
  // not one double exp per token: a 152K vocabulary made that ~2 ms per sequence and step.
  std::copy(l, l + V, soft_.data());
  softmax_rows(soft_.data(), 1, V);
  if (cut == kNegInf && p.top_p >= 1.0f) return draw_all(rng);
  kept_.clear();
  double total = 0;
  for (int64_t i = 0; i < V; ++i) {
    if (l[i] < cut || l[i] == kNegInf) continue;
    kept_.push_back(static_cast<int32_t>(i));
    probs_[i] = soft_[i];
    total += probs_[i];
  }
  VLM_CHECK(total > 0, "no probability mass left after the cut");
  if (p.top_p < 1.0f) {
    // Most likely first (lowest id on ties); grow the sorted prefix until it holds top_p.
    auto more_likely = [&](int32_t a, int32_t b) { return probs_[a] > probs_[b] || (probs_[a] == probs_[b] && a < b); };
    const double target = static_cast<double>(p.top_p) * total;
    size_t sorted = std::min<size_t>(kept_.size(), 64), n_keep = kept_.size();
    while (true) {
      std::partial_sort(kept_.begin(), kept_.begin() + static_cast<int64_t>(sorted), kept_.end(), more_likely);
      double before = 0;
      size_t j = 0;
      for (; j < sorted && before < target; ++j) before += probs_[kept_[j]];
      if (before >= target || sorted == kept_.size()) {
        n_keep = std::max<size_t>(j, 1);
        break;
      }
      sorted = std::min(kept_.size(), sorted * 4);
    }
    kept_.resize(n_keep);
    total = 0;
    for (int32_t t : kept_) total += probs_[t];
  }
  const double u = uniform01(rng) * total;
  double acc = 0;
  for (int32_t t : kept_) {
    acc += probs_[t];
    if (u < acc) return t;
  }
  return kept_.back();  // u within rounding of the total
}

TokenLogprobs Sampler::logprobs_of(const float* logits, int32_t token, int num_top) {
  const int64_t V = vocab_size_;
  const float m = logits[argmax(logits, V)];
  double sum = 0;
  for (int64_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(logits[i] - m));
  const double lse = m + std::log(sum);
  auto lp = [&](int32_t t) { return static_cast<float>(logits[t] - lse); };
  TokenLogprobs r;
  r.token_id = token;
  r.logprob = lp(token);
  for (int64_t i = 0; i < V; ++i)
    if (logits[i] > logits[token]) ++r.rank;
  const int64_t k = num_top < 0 ? V : std::min<int64_t>(num_top, V);
  if (k > 0) {
    kept_.resize(static_cast<size_t>(V));
    std::iota(kept_.begin(), kept_.end(), 0);
    std::partial_sort(kept_.begin(), kept_.begin() + k, kept_.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int64_t i = 0; i < k; ++i) r.top.push_back({kept_[i], lp(kept_[i])});
  }
  return r;
}

void Sampler::apply_constraint(const Sequence& seq, float* l) {
  structured::GrammarMatcher& m = *seq.params.constraint;
  const int64_t V = vocab_size_;
  const std::vector<uint64_t>& mask = m.token_mask(seq.constraint_state);
  const bool accepting = m.accepting(seq.constraint_state);
  eos_saved_.clear();
  for (int32_t t : eos_token_ids_)
    if (t >= 0 && t < V) eos_saved_.push_back(l[t]);
  const int64_t covered = std::min<int64_t>(V, static_cast<int64_t>(mask.size()) * 64);
  for (int64_t w = 0; w * 64 < covered; ++w) {
    const uint64_t bits = mask[static_cast<size_t>(w)];
    const int64_t end = std::min<int64_t>(covered, (w + 1) * 64);
    if (bits == ~uint64_t{0}) continue;
    for (int64_t i = w * 64; i < end; ++i)
      if (!((bits >> (i & 63)) & 1)) l[i] = kNegInf;
  }
  std::fill(l + covered, l + V, kNegInf);  // ids the tokenizer does not have
  size_t k = 0;
  for (int32_t t : eos_token_ids_)  // EOS exactly where the grammar accepts
    if (t >= 0 && t < V) l[t] = accepting ? eos_saved_[k++] : kNegInf;
  // Nothing left (a grammar the vocabulary cannot continue, or min_tokens masking the only way
  // out): EOS ends the sequence rather than a token outside the grammar.
  if (l[argmax(l, V)] == kNegInf)
    for (int32_t t : eos_token_ids_)
      if (t >= 0 && t < V) l[t] = 0.0f;
}

SampleResult Sampler::sample(const float* logits, Sequence& seq) {
  const SamplingParams& p = seq.params;
  const int64_t V = vocab_size_;
  float* l = work_.data();
  std::copy(logits, logits + V, l);
  apply_penalties(seq, l);
  for (const auto& [t, bias] : p.logit_bias) l[t] += bias;
  if (seq.num_output_tokens() < p.min_tokens) {
    for (int32_t t : p.stop_token_ids) l[t] = kNegInf;
    if (!p.ignore_eos)
      for (int32_t t : eos_token_ids_)
        if (t >= 0 && t < V) l[t] = kNegInf;
  }
  if (p.constraint) apply_constraint(seq, l);
  SampleResult r;
  r.token_id = p.greedy() ? argmax(l, V) : sample_random(l, p, seq.rng);
  if (p.constraint) {
    const uint32_t next = p.constraint->advance_token(seq.constraint_state, r.token_id);
    if (next != structured::GrammarMatcher::kDead) seq.constraint_state = next;
  }
  if (p.logprobs) r.logprobs = logprobs_of(logits, r.token_id, *p.logprobs);
  return r;
}

}  // namespace vlm

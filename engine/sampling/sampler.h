// Sampler: picks each sequence's next token from its logits row, with vLLM's semantics:
//   1. penalties on the raw logits: repetition (prompt and output tokens: l / p if l > 0, else
//      l * p), then frequency (l -= f * count in output) and presence (l -= p if in output);
//   2. while a sequence has fewer than min_tokens outputs, its stop tokens (stop_token_ids, and
//      EOS unless ignore_eos) are masked;
//   3. greedy (temperature < 1e-5): argmax, lowest id on ties; the RNG is not touched;
//   4. otherwise: l /= temperature; min_p (keep p >= min_p * p_max); top_k (keep the k largest,
//      ties at the k-th kept); top_p (keep the most likely tokens while the mass before each is
//      < top_p); draw one uniform number from the sequence's own RNG and invert the CDF of the
//      kept tokens.
// With params.logit_bias, the biases are added after the penalties; with params.constraint
// (structured output), tokens the grammar cannot take are masked after step 2 and the sampled
// token advances seq.constraint_state.
// Logprobs are those of the raw model output (log_softmax before penalties and temperature),
// as vLLM's default "raw_logprobs" mode reports them.
// Each sequence's draw depends only on its logits row and its own RNG, so a seeded request gives
// the same tokens whatever else shares its batch.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "engine/scheduling/sequence.h"

namespace vlm {

struct TopLogprob {
  int32_t token_id = 0;
  float logprob = 0;
};

struct TokenLogprobs {
  int32_t token_id = 0;  // the sampled token
  float logprob = 0;     // its logprob
  int64_t rank = 1;      // 1 + number of tokens with a larger logprob
  std::vector<TopLogprob> top;  // the params.logprobs most likely tokens, most likely first
};

struct SampleResult {
  int32_t token_id = 0;
  std::optional<TokenLogprobs> logprobs;  // when params.logprobs is set
};

class Sampler {
 public:
  // eos_token_ids: the model's EOS tokens (masked under min_tokens unless ignore_eos).
  Sampler(int64_t vocab_size, std::vector<int32_t> eos_token_ids);

  int64_t vocab_size() const { return vocab_size_; }

  // Samples the next token of `seq` (its token_ids so far give the penalties) from
  // logits[V]. Advances seq.rng by exactly one draw when not greedy. Not thread-safe (scratch).
  SampleResult sample(const float* logits /*[V]*/, Sequence& seq);

 private:
  void apply_penalties(const Sequence& seq, float* l /*[V]*/);
  // params.constraint: tokens the grammar cannot take in seq.constraint_state become -inf.
  void apply_constraint(const Sequence& seq, float* l /*[V]*/);
  int32_t sample_random(float* l /*[V]*/, const SamplingParams& p, std::mt19937_64& rng);
  // Draws token i with probability soft_[i] / sum(soft_) (soft_ filled by sample_random).
  int32_t draw_all(std::mt19937_64& rng);
  static constexpr int64_t kDrawBlock = 1024;
  TokenLogprobs logprobs_of(const float* logits /*[V]*/, int32_t token, int num_top);

  int64_t vocab_size_;
  std::vector<int32_t> eos_token_ids_;
  std::vector<float> work_;      // [V] processed logits
  std::vector<int32_t> counts_;  // [V] output token counts, zero between calls
  std::vector<uint8_t> seen_;    // [V] prompt or output token, zero between calls
  std::vector<int32_t> kept_;    // candidate ids
  std::vector<double> probs_;    // [V] unnormalized probabilities
  std::vector<float> soft_;      // [V] softmax of the scaled logits (vectorized exp)
  std::vector<double> block_sums_;  // [ceil(V / kDrawBlock)] sums of soft_ by block (the draw)
  std::vector<float> eos_saved_;  // EOS logits before the constraint's mask
};

// A uniform double in [0, 1) from one 64-bit draw.
inline double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace vlm

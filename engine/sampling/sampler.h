// Sampler: picks each sequence's next token from its logits row, with vLLM's semantics:
//   1. penalties on the raw logits: repetition (prompt and output tokens: l / p if l > 0, else
//      l * p), then frequency (l -= f * count in output) and presence (l -= p if in output);
//   2. while a sequence has fewer than min_tokens outputs, its stop tokens (stop_token_ids, and
//      EOS unless ignore_eos) are masked;
//   3. greedy (temperature < 1e-5): argmax, lowest id on ties; the RNG is not touched;
//   4. otherwise: l *= 1 / temperature (f32); min_p (keep l >= max l + log(min_p), i.e.
//      p >= min_p * p_max); top_k (keep the k largest, ties at the k-th kept); top_p (keep the
//      most likely tokens, lowest id first on ties, while the mass before each is < top_p); draw
//      one uniform number from the sequence's own RNG and invert the CDF of the kept tokens'
//      masses e^(l - max l) (f32), walked in id order (with top_p: most likely first).
// With params.logit_bias, the biases are added after the penalties; with params.constraint
// (structured output), tokens the grammar cannot take are masked after step 2 and the sampled
// token advances seq.constraint_state.
// Logprobs are those of the raw model output (log_softmax before penalties and temperature),
// as vLLM's default "raw_logprobs" mode reports them.
// Each sequence's draw depends only on its logits row and its own RNG, so a seeded request gives
// the same tokens whatever else shares its batch.
// Cost (a Qwen row is 152K floats; on a prefix-cache hit the whole step takes ~2 ms): one
// vectorized pass of block maxima over the row, then greedy scans one 64-token block; a draw adds
// one pass of exp by 1024-token blocks and the scan of one block; top_k, min_p and top_p read only
// the blocks whose maximum reaches their cut. tests/engine/sampling/ checks every path against a
// naive reference (sampler_reference.h: whole-row passes in double).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "engine/sampling/logits_view.h"
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
  // The row is read, never copied or written (except with params.constraint, whose mask is dense):
  // penalties, logit_bias and min_tokens masks become patches of the tokens they touch.
  SampleResult sample(const float* logits /*[V]*/, Sequence& seq);

  // Blocks of the sampler's passes over the vocabulary: maxima per kMaxBlock tokens (greedy's
  // argmax and the cuts search only the blocks that can hold their tokens), probability mass per
  // kDrawBlock tokens (the draw scans one such block).
  static constexpr int64_t kMaxBlock = 64;
  static constexpr int64_t kDrawBlock = 1024;

 private:
  // Penalties, logit_bias and min_tokens masks of seq as patches_ over logits (sorted by id).
  void build_patches(const float* logits /*[V]*/, const Sequence& seq);
  // params.constraint: logits with the patches and the grammar's mask, in work_.
  const float* constrained_row(const float* logits /*[V]*/, const Sequence& seq);
  // bmax_ of v's row, the patches included.
  void compute_block_max(const LogitsView& v);
  float row_max() const;  // from bmax_
  int32_t argmax(const LogitsView& v);  // lowest id on ties; needs bmax_
  int32_t sample_random(const LogitsView& v, const SamplingParams& p, std::mt19937_64& rng);
  // Mass of every token, e^(l * s - m), by kDrawBlock blocks into block_sums_; returns the total.
  double row_mass(const LogitsView& v, float s, float m);
  // Nothing cut: token i with probability e^(l_i * s - m) / total, the CDF walked in id order.
  int32_t draw_all(const LogitsView& v, float s, float m, std::mt19937_64& rng);
  // cand_ids_ / cand_vals_: the tokens whose scaled logit l * s is >= cut, in id order, with it.
  void collect(const LogitsView& v, float s, float cut);
  // The k-th largest scaled logit (collects a superset of the k largest first).
  float kth_largest(const LogitsView& v, float s, int64_t k);
  // keys_: the candidates, cut to the most likely ones (lowest id first on ties) while the mass
  // before each is < target (at least one); returns their mass.
  double nucleus(double target);
  TokenLogprobs logprobs_of(const float* logits /*[V]*/, int32_t token, int num_top);
  // params.constraint: tokens the grammar cannot take in seq.constraint_state become -inf.
  void apply_constraint(const Sequence& seq, float* l /*[V]*/);

  int64_t vocab_size_;
  std::vector<int32_t> eos_token_ids_;
  std::vector<LogitPatch> patches_;
  std::vector<int32_t> slot_;    // [V] index in patches_ while building them, else -1
  std::vector<int32_t> counts_;  // [V] output token counts, zero between calls
  std::vector<float> bmax_;      // [ceil(V / kMaxBlock)] block maxima of the (patched) row
  std::vector<float> sel_;       // selection scratch (copies of maxima or candidate values)
  std::vector<double> block_sums_;  // [ceil(V / kDrawBlock)] mass by block (the draw)
  std::vector<float> scratch_;   // [kDrawBlock] a patched range of the row
  std::vector<float> terms_;     // [kDrawBlock] the masses of one block's tokens
  std::vector<int32_t> cand_ids_;  // candidates of a cut: ids, scaled logits, masses
  std::vector<float> cand_vals_, cand_p_;
  std::vector<uint64_t> keys_;   // top_p's candidates as ordered keys (mass, id)
  std::vector<int32_t> order_;   // candidate indices (the top logprobs)
  std::vector<float> work_;      // [V] constrained row (params.constraint only)
  std::vector<float> eos_saved_;  // EOS logits before the constraint's mask
};

// A uniform double in [0, 1) from one 64-bit draw.
inline double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace vlm

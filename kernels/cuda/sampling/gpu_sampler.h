// Sampling on the GPU: each job picks one token from a row of the step's logits [R, V] (f32,
// on the device) with the CPU Sampler's semantics (engine/sampling/sampler.h), so only token ids
// and the asked-for logprobs cross to the host:
//   1. penalties on the raw logits (repetition on prompt and output tokens, then frequency and
//      presence on output tokens), given as one (token, output count) entry per distinct token;
//   2. masked tokens (stop tokens under min_tokens) set to -inf;
//   3. greedy (temperature < 1e-5): argmax, lowest id on ties;
//   4. otherwise l /= temperature; min_p, top_k (ties at the k-th kept) and top_p (the most
//      likely tokens while the mass before each is < top_p) as thresholds, then the inverse CDF of
//      the kept tokens at u * total, u in [0, 1) drawn on the host from the sequence's own RNG.
//      Differences from the CPU, both documented there as order details: the CDF is walked in id
//      order (the CPU walks top_p's kept set most likely first), and top_p keeps every token
//      tied with the boundary token (the CPU breaks that tie by id). The draw is from the same
//      distribution and as reproducible for a seed.
// Logprobs (num_top >= 0): log_softmax of the raw row, the sampled token's value and rank, and
// the num_top (<= kMaxTopLogprobs) most likely tokens, most likely first, lowest id on ties.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace vlm::cuda {

constexpr int kMaxTopLogprobs = 20;

struct SampleJob {
  int32_t row = 0;             // logits row
  float temperature = 1.0f;
  int32_t top_k = 0;           // <= 0 or >= V: off
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t penalty_begin = 0, penalty_end = 0;  // range of the penalty arrays
  int32_t mask_begin = 0, mask_end = 0;        // range of the mask array
  int32_t num_top = -1;        // -1: no logprobs; else 0..kMaxTopLogprobs
  double u = 0.0;              // uniform draw in [0, 1) (unused when greedy)
};

struct SampleOut {
  int32_t token = 0;
  float logprob = 0.0f;
  int64_t rank = 1;
  int32_t top_ids[kMaxTopLogprobs];
  float top_logprobs[kMaxTopLogprobs];
};

// Runs jobs[J] against logits [R, V]. penalty_tokens/penalty_counts [P] (distinct tokens per job:
// count = occurrences in the output, 0 for prompt-only tokens), mask_tokens [Mk]; work [J, V]
// f32 scratch. out [J]. All device pointers; enqueued on `s`.
void sample_rows(const float* logits, int64_t V, const SampleJob* jobs, int J, const int32_t* penalty_tokens,
                 const int32_t* penalty_counts, const int32_t* mask_tokens, float* work, SampleOut* out,
                 cudaStream_t s);

}  // namespace vlm::cuda

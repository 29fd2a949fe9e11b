// Records SinkRouter calibration samples from a model's real decode (vlm-calibrate-sink): for
// each context length and prompt, the prompt is fitted to the length, prefilled (anchors
// captured at the last chunk, as the engine does) and decoded greedily for a few steps with
// routing on but a threshold no score reaches (tau > 1: nothing is skipped, the decode is the
// exact path). A SinkRouterProbe sees every routed (token, layer) row and records, per kv
// group, the group score and the oracle group first-token attention mass (first_token_mass.h).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/core/dtype.h"
#include "kernels/sink_router/sink_router_config.h"
#include "model/decoder/llm_decoder.h"
#include "tools/vlm-calibrate-sink/sink_calibration.h"

namespace vlm {

struct CalibrationRunOptions {
  std::vector<int> lengths;  // prompt lengths (cached tokens before the first decode step)
  int decode_steps = 8;      // greedy decode tokens per prompt and length (each one is recorded)
  int prefill_chunk = 512;   // prefill chunk size in tokens
  int block_size = 16;
  DType kv_dtype = DType::BF16;
  SinkAggregation aggregation = SinkAggregation::Min;  // of the score and of the oracle mass
  int num_dense_layers = 2;  // layers never routed, hence never recorded
};

// The prompt cut or repeated to `length` tokens: its first token once (the sink anchor), then
// its remaining tokens cyclically. Preconditions: prompt.size() >= 2, length >= 1.
std::vector<int32_t> fit_prompt_to_length(const std::vector<int32_t>& prompt, int length);

// One LengthSamples per options.lengths entry (same order), pooling every prompt, decode step,
// routed layer and kv group. Throws InternalError for an invalid token id (the caller checks).
std::vector<LengthSamples> record_sink_samples(const LlmDecoder& decoder,
                                               const std::vector<std::vector<int32_t>>& prompts,
                                               const CalibrationRunOptions& opt);

}  // namespace vlm

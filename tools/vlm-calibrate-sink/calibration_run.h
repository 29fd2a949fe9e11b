// Records SinkRouter calibration samples from a model's real decode (vlm-calibrate-sink): for
// each context length and prompt, the prompt is fitted to the length, prefilled (anchors
// captured at the last chunk, as the engine does) and decoded greedily for a few steps with
// routing on but a threshold no score reaches (tau > 1: nothing is skipped, the decode is the
// exact path). A SinkRouterProbe sees every routed (token, layer) row and records, per kv
// group, the group score and the oracle group first-token attention mass (first_token_mass.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/core/dtype.h"
#include "kernels/sink_router/sink_router_config.h"
#include "model/decoder/forward_batch.h"
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

// Where the recording's forward passes run: one sequence's chunks over a cache of its own.
class CalibrationRunner {
 public:
  virtual ~CalibrationRunner() = default;
  // A cache of num_blocks blocks for the next sequence (its contents are overwritten from block 0).
  virtual void reset(int64_t num_blocks) = 0;
  // Runs the batch (its anchor stores' probes see its routed rows before this returns) and puts
  // the logits of its rows in `logits`.
  virtual void forward(const ForwardBatch& batch, std::vector<float>& logits) = 0;
};

// The CPU decoder over a KVCache of opt.kv_dtype.
std::unique_ptr<CalibrationRunner> make_cpu_calibration_runner(const LlmDecoder& decoder,
                                                               const CalibrationRunOptions& opt);
// The GPU decoder (CudaDecoder, weights, activations and cache in opt.kv_dtype, one cache sized
// for the longest of opt.lengths): its scores, decisions and first-token masses are measured on
// the device (cuda_sink_router_step.h). Throws InternalError in a build without CUDA.
std::unique_ptr<CalibrationRunner> make_cuda_calibration_runner(const LlmDecoder& decoder,
                                                                const CalibrationRunOptions& opt);

// One LengthSamples per options.lengths entry (same order), pooling every prompt, decode step,
// routed layer and kv group. Throws InternalError for an invalid token id (the caller checks).
std::vector<LengthSamples> record_sink_samples(CalibrationRunner& runner, const ModelConfig& config,
                                               const std::vector<std::vector<int32_t>>& prompts,
                                               const CalibrationRunOptions& opt);
// The same on the CPU decoder.
std::vector<LengthSamples> record_sink_samples(const LlmDecoder& decoder,
                                               const std::vector<std::vector<int32_t>>& prompts,
                                               const CalibrationRunOptions& opt);

}  // namespace vlm

#include "tools/vlm-calibrate-sink/calibration_run.h"

#include <algorithm>
#include <memory>

#include "engine/scheduling/kv_cache.h"
#include "kernels/core/check.h"
#include "kernels/sink_router/first_token_mass.h"
#include "model/decoder/forward_batch.h"
#include "model/methods/sink_anchors.h"

namespace vlm {
namespace {

// Records (score, oracle mass) of every kv group of every routed row it sees.
class SampleProbe : public SinkRouterProbe {
 public:
  SampleProbe(SinkAggregation agg, int num_kv_heads, std::vector<SinkSample>* out)
      : agg_(agg), out_(out), group_(static_cast<size_t>(num_kv_heads)) {}
  void on_routed_row(const SinkRoutedRow& r) override {
    mass_.resize(r.num_heads);
    const int Hkv = static_cast<int>(group_.size());
    if (r.head_mass == nullptr)  // the CPU: measured here; the GPU measured it on the device
      first_token_attention_mass(r.q, r.num_heads, *r.kv, r.block_table, r.context_len, r.scale, mass_.data());
    aggregate_group_mass(r.head_mass ? r.head_mass : mass_.data(), r.num_heads, Hkv, agg_, group_.data());
    for (int g = 0; g < Hkv; ++g) out_->push_back({r.scores[g], group_[g]});
  }

 private:
  SinkAggregation agg_;
  std::vector<SinkSample>* out_;
  std::vector<float> mass_, group_;
};

int argmax(const std::vector<float>& x) {
  return static_cast<int>(std::max_element(x.begin(), x.end()) - x.begin());
}

}  // namespace

std::vector<int32_t> fit_prompt_to_length(const std::vector<int32_t>& prompt, int length) {
  VLM_CHECK(prompt.size() >= 2 && length >= 1, "prompt of {} tokens, length {}", prompt.size(), length);
  std::vector<int32_t> out{prompt[0]};
  for (size_t i = 0; static_cast<int>(out.size()) < length; i = (i + 1) % (prompt.size() - 1))
    out.push_back(prompt[1 + i]);
  return out;
}

class CpuRunner : public CalibrationRunner {
 public:
  CpuRunner(const LlmDecoder& dec, const CalibrationRunOptions& opt) : dec_(dec), opt_(opt) {}
  void reset(int64_t num_blocks) override {
    const ModelConfig& mc = dec_.config();
    KVCacheShape shape;
    shape.num_layers = mc.num_layers;
    shape.num_blocks = num_blocks;
    shape.block_size = opt_.block_size;
    shape.num_kv_heads = static_cast<int>(mc.num_kv_heads);
    shape.head_dim = static_cast<int>(mc.head_dim);
    shape.dtype = opt_.kv_dtype;
    if (!cache_ || cache_->shape().num_blocks != num_blocks) cache_ = std::make_unique<KVCache>(shape);
  }
  void forward(const ForwardBatch& fb, std::vector<float>& logits) override {
    dec_.forward(fb, cache_->layers(), logits);
  }

 private:
  const LlmDecoder& dec_;
  CalibrationRunOptions opt_;
  std::unique_ptr<KVCache> cache_;
};

std::unique_ptr<CalibrationRunner> make_cpu_calibration_runner(const LlmDecoder& decoder,
                                                               const CalibrationRunOptions& opt) {
  return std::make_unique<CpuRunner>(decoder, opt);
}

std::vector<LengthSamples> record_sink_samples(const LlmDecoder& dec, const std::vector<std::vector<int32_t>>& prompts,
                                               const CalibrationRunOptions& opt) {
  auto runner = make_cpu_calibration_runner(dec, opt);
  return record_sink_samples(*runner, dec.config(), prompts, opt);
}

std::vector<LengthSamples> record_sink_samples(CalibrationRunner& runner, const ModelConfig& mc,
                                               const std::vector<std::vector<int32_t>>& prompts,
                                               const CalibrationRunOptions& opt) {
  VLM_CHECK(opt.decode_steps >= 1 && opt.prefill_chunk >= 1 && opt.block_size >= 1, "decode_steps {} chunk {} block {}",
            opt.decode_steps, opt.prefill_chunk, opt.block_size);
  SinkRouterConfig route;  // routed, never skipped: tau clamps to tau_max = 1.01 > any cosine
  route.c0 = 2.0;
  route.aggregation = opt.aggregation;
  route.num_dense_layers = opt.num_dense_layers;
  const int B = opt.block_size;
  std::vector<LengthSamples> out;
  for (int length : opt.lengths) {
    LengthSamples ls;
    ls.context_len = length;
    const int64_t total = static_cast<int64_t>(length) + opt.decode_steps;
    const int64_t num_blocks = (total + B - 1) / B;
    runner.reset(num_blocks);
    std::vector<int32_t> table(static_cast<size_t>(num_blocks));
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
    for (const auto& prompt : prompts) {
      std::vector<int32_t> tokens = fit_prompt_to_length(prompt, length);
      SinkAnchors anchors;
      SampleProbe probe(opt.aggregation, static_cast<int>(mc.num_kv_heads), &ls.samples);
      anchors.probe = &probe;
      int cached = 0;
      std::vector<float> logits;
      auto feed = [&](int n, bool finishes_prefill) {
        SequenceChunk ch;
        ch.token_ids = std::span<const int32_t>(tokens.data() + cached, n);
        ch.start_pos = cached;
        ch.block_table = std::span<const int32_t>(table.data(), (cached + n + B - 1) / B);
        ch.finishes_prefill = finishes_prefill;
        ForwardBatch fb = make_forward_batch(std::span<const SequenceChunk>(&ch, 1), B);
        fb.sink_anchors = {&anchors};
        fb.sink_router = &route;
        runner.forward(fb, logits);
        cached += n;
      };
      while (cached < length) {
        const int n = std::min(opt.prefill_chunk, length - cached);
        feed(n, cached + n == length);
      }
      for (int step = 0; step < opt.decode_steps; ++step) {
        tokens.push_back(argmax(logits));
        feed(1, false);
      }
    }
    out.push_back(std::move(ls));
  }
  return out;
}

}  // namespace vlm

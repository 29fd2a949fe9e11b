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
  SampleProbe(SinkAggregation agg, std::vector<SinkSample>* out) : agg_(agg), out_(out) {}
  void on_routed_row(const SinkRoutedRow& r) override {
    const int Hkv = r.kv->num_kv_heads;
    mass_.resize(r.num_heads);
    group_.resize(Hkv);
    first_token_attention_mass(r.q, r.num_heads, *r.kv, r.block_table, r.context_len, r.scale, mass_.data());
    aggregate_group_mass(mass_.data(), r.num_heads, Hkv, agg_, group_.data());
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

std::vector<LengthSamples> record_sink_samples(const LlmDecoder& dec, const std::vector<std::vector<int32_t>>& prompts,
                                               const CalibrationRunOptions& opt) {
  VLM_CHECK(opt.decode_steps >= 1 && opt.prefill_chunk >= 1 && opt.block_size >= 1, "decode_steps {} chunk {} block {}",
            opt.decode_steps, opt.prefill_chunk, opt.block_size);
  const ModelConfig& mc = dec.config();
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
    KVCacheShape shape;
    shape.num_layers = mc.num_layers;
    shape.num_blocks = (total + B - 1) / B;
    shape.block_size = B;
    shape.num_kv_heads = static_cast<int>(mc.num_kv_heads);
    shape.head_dim = static_cast<int>(mc.head_dim);
    shape.dtype = opt.kv_dtype;
    KVCache cache(shape);
    std::vector<int32_t> table(static_cast<size_t>(shape.num_blocks));
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
    for (const auto& prompt : prompts) {
      std::vector<int32_t> tokens = fit_prompt_to_length(prompt, length);
      SinkAnchors anchors;
      SampleProbe probe(opt.aggregation, &ls.samples);
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
        dec.forward(fb, cache.layers(), logits);
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

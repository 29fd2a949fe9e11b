#include "tests/support/decoder_harness.h"

#include <cmath>

#include "kernels/core/check.h"
#include "kernels/core/log.h"

namespace vlm::testing {

// Keep test output readable: model loading logs at info level.
[[maybe_unused]] static const bool kQuietLogs = (spdlog::set_level(spdlog::level::warn), true);

int Reference::num_prompts() const {
  int n = 0;
  while (file->tensors().count("p" + std::to_string(n) + ".ids")) ++n;
  return n;
}

std::vector<int32_t> Reference::ints(const std::string& name) const {
  const TensorView& t = file->tensors().at(name);
  const auto* p = t.as<const int32_t>();
  return std::vector<int32_t>(p, p + t.numel());
}

Reference load_reference(const std::string& model_name) {
  return Reference{SafetensorsFile::open(fixture_model_dir(model_name) + "/reference.safetensors")};
}

double max_row_rel_error(const float* ours, const float* ref, int64_t rows, int64_t V) {
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < V; ++i) {
      const double d = static_cast<double>(ours[r * V + i]) - ref[r * V + i];
      diff += d * d;
      norm += static_cast<double>(ref[r * V + i]) * ref[r * V + i];
    }
    worst = std::max(worst, std::sqrt(diff) / std::sqrt(norm));
  }
  return worst;
}

DecoderRunner::DecoderRunner(const std::string& model_name, int block_size, int64_t num_blocks,
                             DType kv_dtype, uint32_t shuffle_seed, const WeightLoadOptions& load)
    : decoder_(LlmDecoder::load(fixture_model_dir(model_name), load)), block_size_(block_size) {
  const ModelConfig& c = decoder_->config();
  KVCacheShape shape;
  shape.num_layers = c.num_layers;
  shape.num_blocks = num_blocks;
  shape.block_size = block_size;
  shape.num_kv_heads = static_cast<int>(c.num_kv_heads);
  shape.head_dim = static_cast<int>(c.head_dim);
  shape.dtype = kv_dtype;
  cache_ = std::make_unique<KVCache>(shape);
  free_blocks_.resize(static_cast<size_t>(num_blocks));
  std::iota(free_blocks_.begin(), free_blocks_.end(), 0);
  std::shuffle(free_blocks_.begin(), free_blocks_.end(), std::mt19937(shuffle_seed));
}

void DecoderRunner::ensure_blocks(TestSequence& seq, int32_t total_tokens) {
  while (static_cast<int64_t>(seq.blocks.size()) * block_size_ < total_tokens) {
    VLM_CHECK(!free_blocks_.empty(), "test KV cache out of blocks");
    seq.blocks.push_back(free_blocks_.back());
    free_blocks_.pop_back();
  }
}

void DecoderRunner::step(std::vector<TestSequence*> seqs, const std::vector<int32_t>& counts) {
  std::vector<SequenceChunk> chunks;
  std::vector<TestSequence*> fed;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (counts[i] == 0) continue;
    TestSequence& s = *seqs[i];
    VLM_CHECK(s.cached + counts[i] <= static_cast<int32_t>(s.tokens.size()), "feeding past the tokens");
    ensure_blocks(s, s.cached + counts[i]);
    SequenceChunk c;
    c.token_ids = std::span<const int32_t>(s.tokens.data() + s.cached, counts[i]);
    c.start_pos = s.cached;
    c.block_table = s.blocks;
    c.logits = logits_for;
    chunks.push_back(c);
    fed.push_back(&s);
  }
  ForwardBatch fb = make_forward_batch(chunks, block_size_);
  if (sparse_prefill) {
    fb.sparse_prefill.assign(fed.size(), SparsePrefillConfig{});
    fb.prompt_lens.assign(fed.size(), 0);
    for (size_t i = 0; i < fed.size(); ++i) {
      if (chunks[i].token_ids.size() > 1) fb.sparse_prefill[i] = *sparse_prefill;
      fb.prompt_lens[i] = static_cast<int32_t>(fed[i]->tokens.size());
    }
  }
  std::vector<float> logits;
  if (forward_override) forward_override(fb, logits);
  else decoder_->forward(fb, cache_->layers(), logits);
  const int64_t V = vocab();
  size_t row = 0;
  for (size_t i = 0; i < fed.size(); ++i) {
    const int32_t n = static_cast<int32_t>(chunks[i].token_ids.size());
    const int32_t rows = logits_for == LogitsFor::All ? n : logits_for == LogitsFor::Last ? 1 : 0;
    fed[i]->logits.insert(fed[i]->logits.end(), logits.begin() + static_cast<int64_t>(row) * V,
                          logits.begin() + static_cast<int64_t>(row + rows) * V);
    fed[i]->cached += n;
    row += rows;
  }
}

void DecoderRunner::prefill(TestSequence& seq, int32_t chunk) {
  while (seq.cached < static_cast<int32_t>(seq.tokens.size()))
    step({&seq}, {std::min<int32_t>(chunk, static_cast<int32_t>(seq.tokens.size()) - seq.cached)});
}

std::vector<int32_t> DecoderRunner::greedy(TestSequence& seq, int n) {
  prefill(seq, 64);
  const int64_t V = vocab();
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const float* last = seq.logits.data() + (static_cast<int64_t>(seq.cached) - 1) * V;
    const auto next = static_cast<int32_t>(std::max_element(last, last + V) - last);
    out.push_back(next);
    seq.tokens.push_back(next);
    if (i + 1 < n) step({&seq}, {1});
  }
  return out;
}

}  // namespace vlm::testing

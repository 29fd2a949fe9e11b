// Test harness: a fixture model with its Hugging Face references, a KV cache, and a tiny block
// allocator handing out blocks in a shuffled order (so block tables are never contiguous).
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/scheduling/kv_cache.h"
#include "model/decoder/llm_decoder.h"
#include "model/decoder/safetensors.h"

namespace vlm::testing {

// A fixture model's directory; an absolute path is taken as it is (a checkpoint a test wrote).
inline std::string fixture_model_dir(const std::string& name) {
  if (!name.empty() && name[0] == '/') return name;
  return std::string(VLM_FIXTURES_DIR) + "/models/" + name;
}

// The recorded references of one fixture model (see tools/fixtures/make_decoder_fixtures.py).
struct Reference {
  std::unique_ptr<SafetensorsFile> file;
  std::vector<int32_t> ids(int prompt) const { return ints("p" + std::to_string(prompt) + ".ids"); }
  std::vector<int32_t> greedy(int prompt) const { return ints("p" + std::to_string(prompt) + ".greedy"); }
  TensorView logits(int prompt) const { return file->tensors().at("p" + std::to_string(prompt) + ".logits"); }
  int num_prompts() const;
  std::vector<int32_t> ints(const std::string& name) const;
};
Reference load_reference(const std::string& model_name);

// Max over rows of ||ours[r] - ref[r]|| / ||ref[r]||; ours and ref are [rows, V].
double max_row_rel_error(const float* ours, const float* ref, int64_t rows, int64_t V);

// One sequence being run through the decoder step by step.
struct TestSequence {
  std::vector<int32_t> tokens;   // prompt, then generated tokens
  int32_t cached = 0;            // tokens whose KV is in the cache
  std::vector<int32_t> blocks;   // block table
  std::vector<float> logits;     // logits of every row computed so far, [cached, V] (with
                                 // DecoderRunner::logits_for = Last: of each chunk's last row)
};

class DecoderRunner {
 public:
  // load: where the weights come from (--load-format dummy: made from config.json).
  DecoderRunner(const std::string& model_name, int block_size, int64_t num_blocks,
                DType kv_dtype = DType::F32, uint32_t shuffle_seed = 7, const WeightLoadOptions& load = {});
  const LlmDecoder& decoder() const { return *decoder_; }
  int64_t vocab() const { return decoder_->config().vocab_size; }
  const KVCache& cache() const { return *cache_; }

  // One forward step: sequence i feeds `counts[i]` uncached tokens (0 = not in this step).
  // Logits of every fed row are appended to the sequence's logits.
  void step(std::vector<TestSequence*> seqs, const std::vector<int32_t>& counts);
  // Feeds a sequence's uncached tokens in chunks of `chunk` tokens.
  void prefill(TestSequence& seq, int32_t chunk);
  // Greedy decoding of n tokens after the prompt (prefilled first if needed).
  std::vector<int32_t> greedy(TestSequence& seq, int n);

  // Which rows of each fed chunk get logits (the LM head runs for those rows only).
  LogitsFor logits_for = LogitsFor::All;

  // When set, step() gives every fed chunk of more than one row this sparse-prefill setting
  // (ForwardBatch::sparse_prefill, prompt length = the sequence's tokens); others stay dense.
  std::optional<SparsePrefillConfig> sparse_prefill;

  // When set, step() runs the batch through this instead of the CPU decoder (e.g. a GPU backend
  // with a cache of its own): it must return the logits of the batch's logits_indices rows.
  std::function<void(const ForwardBatch&, std::vector<float>& logits)> forward_override;

 private:
  void ensure_blocks(TestSequence& seq, int32_t total_tokens);

  std::unique_ptr<LlmDecoder> decoder_;
  std::unique_ptr<KVCache> cache_;
  int block_size_;
  std::vector<int32_t> free_blocks_;
};

}  // namespace vlm::testing

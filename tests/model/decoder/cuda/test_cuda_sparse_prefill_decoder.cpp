// Sparse prefill through the GPU decoder (CudaDecoder + CudaSparsePrefill) against the GPU's dense
// path and the CPU decoder's sparse prefill on the same batches, on a random Qwen2-shaped model
// with head size 64 (the block-sparse kernel takes D 64 / 128 and a bf16 cache; the fixture
// models' heads are 16 wide). The GPU runs bf16, the CPU f32 weights over a bf16 cache, so every
// closeness bound is the measured GPU-dense vs CPU-dense error of the same prompt (the rounding
// scale of bf16), not a constant:
//  - plans covering every causal block (grid stride 2 with band 1: the device-planned path;
//    A-shape with an unbounded window: the host-plan path) equal the dense GPU path;
//  - a grid config (fixed stride 16, slash band 1, no lines: its token-level pattern does not
//    depend on the searched phase, so GPU and CPU must make the same plan) on the device-planned
//    path, MMInference's default grid head (online stride / phase / line search) on that path,
//    a mixed-heads MMInference config (grid, A-shape, dense heads: the host-plan fallback), and two
//    sparse sequences in one step (host plans too): logits equal the CPU's sparse prefill within
//    the rounding scale, while the sparse-vs-dense gap is many times larger (the plan is sparse),
//    and the computed/causal key-block counts equal the CPU's -- except MMInference's default
//    head, whose online search on a random model meets near-tied scores that bf16 and f32 inputs
//    break differently (measured on the H100: 0.45 vs the CPU's sparse logits, 1.53 sparse vs
//    dense, density 0.416 vs 0.415): there, nearer the CPU's sparse logits than half the
//    sparse-vs-dense gap and the same density within 0.02.
// Prompts of 2048 tokens prefilled in chunks of 1024 (the second chunk attends earlier context).
// Skips without a GPU.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>

#include "engine/scheduling/kv_cache.h"
#include "model/decoder/cuda/cuda_decoder.h"
#include "model/decoder/safetensors.h"
#include "model/layers/cuda/cuda_sparse_prefill.h"
#include "tests/support/decoder_harness.h"
#include "tests/support/gpu_test.h"
#include "tests/support/random_qwen2.h"

namespace vlm::testing {
namespace {

constexpr int kC = 256, kI = 512, kL = 4, kH = 4, kHkv = 2, kD = 64, kV = 512, kB = 16;
constexpr int kPrompt = 2048, kChunk = 1024;
constexpr int64_t kBlocks = 2 * kPrompt / kB + 8;

// A random Qwen2 checkpoint with head size 64 in a temporary directory.
std::string write_model() {
  RandomQwen2 m{.hidden = kC, .intermediate = kI, .layers = kL, .heads = kH, .kv_heads = kHkv, .vocab = kV};
  m.max_positions = 8192;
  m.seed = 11;
  return write_random_qwen2("vlm_sparse_gpu", m);
}

struct Result {
  std::vector<std::vector<float>> logits;  // per sequence, [kPrompt, V]
  std::vector<BlockCounts> counts;         // per sequence
};

// The model on the CPU (f32 weights, bf16 cache) and on the GPU (bf16), caches of the same block
// count; both prefill the same prompts through the same (shuffled) block tables.
class Models {
 public:
  Models() : host_(LlmDecoder::load(dir_)) {
    KVCacheShape shape;
    shape.num_layers = kL;
    shape.num_blocks = kBlocks;
    shape.block_size = kB;
    shape.num_kv_heads = kHkv;
    shape.head_dim = kD;
    shape.dtype = DType::BF16;
    cpu_cache_ = std::make_unique<KVCache>(shape);
    CudaDecoderOptions o;
    o.dtype = DType::BF16;
    o.block_size = kB;
    o.num_kv_blocks = kBlocks;
    o.max_tokens_per_step = 2 * kChunk;
    o.max_logit_rows = 2 * kChunk;
    gpu_ = std::make_unique<CudaDecoder>(*host_, o);
    std::vector<int32_t> ids(kBlocks);
    for (int32_t i = 0; i < kBlocks; ++i) ids[i] = i;
    std::shuffle(ids.begin(), ids.end(), std::mt19937(5));
    for (int s = 0; s < 2; ++s)
      tables_[s].assign(ids.begin() + s * (kPrompt / kB), ids.begin() + (s + 1) * (kPrompt / kB));
  }
  ~Models() { std::filesystem::remove_all(dir_); }

  // Prefills `prompts` (1 or 2, kPrompt tokens each) in steps of kChunk tokens per sequence,
  // every step feeding all sequences; cfg (if any) is every sequence's sparse prefill; stores (if
  // any, one per prompt) keep the grid layouts across chunks (grid_search_once).
  Result run(bool on_gpu, const std::vector<std::vector<int32_t>>& prompts, const std::optional<SparsePrefillConfig>& cfg,
             std::vector<GridLayoutStore>* stores = nullptr) {
    const size_t S = prompts.size();
    Result r;
    r.logits.resize(S);
    r.counts.resize(S);
    for (int start = 0; start < kPrompt; start += kChunk) {
      std::vector<SequenceChunk> chunks(S);
      for (size_t s = 0; s < S; ++s) {
        chunks[s].token_ids = std::span<const int32_t>(prompts[s].data() + start, kChunk);
        chunks[s].start_pos = start;
        chunks[s].block_table = tables_[s];
        chunks[s].logits = LogitsFor::All;
      }
      ForwardBatch fb = make_forward_batch(chunks, kB);
      if (cfg) {
        fb.sparse_prefill.assign(S, *cfg);
        fb.prompt_lens.assign(S, kPrompt);
        for (size_t s = 0; s < S; ++s) fb.sparse_block_counts.push_back(&r.counts[s]);
        if (stores)
          for (size_t s = 0; s < S; ++s) fb.grid_layouts.push_back(&(*stores)[s]);
      }
      std::vector<float> logits;
      if (on_gpu) {
        gpu_->forward(fb);
        gpu_->download_logits(logits);
      } else {
        host_->forward(fb, cpu_cache_->layers(), logits);
      }
      for (size_t s = 0; s < S; ++s)
        r.logits[s].insert(r.logits[s].end(), logits.begin() + static_cast<int64_t>(s) * kChunk * kV,
                           logits.begin() + static_cast<int64_t>(s + 1) * kChunk * kV);
    }
    return r;
  }

 private:
  std::string dir_ = write_model();
  std::unique_ptr<LlmDecoder> host_;
  std::unique_ptr<KVCache> cpu_cache_;
  std::unique_ptr<CudaDecoder> gpu_;
  std::vector<int32_t> tables_[2];
};

std::vector<int32_t> random_prompt(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(kPrompt);
  for (auto& t : ids) t = static_cast<int32_t>(rng() % kV);
  return ids;
}

double err(const std::vector<float>& a, const std::vector<float>& b) {
  return max_row_rel_error(a.data(), b.data(), kPrompt, kV);
}

// Grid heads whose token-level pattern is fixed by the stride alone: slash band +-1 group, no
// vertical / horizontal lines, the 64 sink keys (q_len and keys multiples of stride * 64, so each
// 64-row block holds one group and the phase only renames groups).
GridParams slash_grid() {
  GridParams g;
  g.stride = 16;
  g.use_vline = g.use_hline = false;
  g.band = 1;
  return g;
}

SparsePrefillConfig grid_config(const GridParams& g) {
  SparsePrefillConfig c;
  c.method = SparsePrefillMethod::Grid;
  c.min_prompt_len = 0;
  c.grid = g;
  return c;
}

// slash_grid() with its stride searched (stride 0), once per prompt (grid_search_once): later
// chunks plan from the sequence's store of layouts.
SparsePrefillConfig search_once_config() {
  GridParams searched = slash_grid();
  searched.stride = 0;
  SparsePrefillConfig c = grid_config(searched);
  c.grid_search_once = true;
  return c;
}

class CudaSparsePrefillDecoder : public ::testing::Test {
 protected:
  void SetUp() override {
    VLM_REQUIRE_GPU();
    m_ = std::make_unique<Models>();
    prompts_ = {random_prompt(1), random_prompt(2)};
    gpu_dense_ = m_->run(true, prompts_, std::nullopt);
    cpu_dense_ = m_->run(false, prompts_, std::nullopt);
    for (size_t s = 0; s < prompts_.size(); ++s)
      scale_ = std::max(scale_, err(gpu_dense_.logits[s], cpu_dense_.logits[s]));
    std::printf("GPU bf16 dense vs CPU dense (f32, bf16 cache): worst row logit rel error %.4g\n", scale_);
    ASSERT_GT(scale_, 0.0);
    ASSERT_LT(scale_, 0.1);  // the bf16 path itself is sane
  }

  // GPU sparse vs CPU sparse for the first `n` prompts under cfg. With same_decisions (plans
  // that do not hang on near-tied search scores): logits within the rounding scale, far from
  // dense, and the same block counts. Without (the online search on a random model, whose stride
  // / phase / line scores are near ties that the GPU's bf16 inputs and the CPU's f32 ones break
  // differently): nearer the CPU's sparse logits than those are to dense, and the same density
  // within 0.02.
  void expect_matches_cpu(const SparsePrefillConfig& cfg, size_t n, const char* name, bool same_decisions = true) {
    const std::vector<std::vector<int32_t>> prompts(prompts_.begin(), prompts_.begin() + static_cast<int64_t>(n));
    const Result g = m_->run(true, prompts, cfg), c = m_->run(false, prompts, cfg);
    for (size_t s = 0; s < n; ++s) {
      SCOPED_TRACE(std::string(name) + " sequence " + std::to_string(s));
      const double e = err(g.logits[s], c.logits[s]), gap = err(c.logits[s], cpu_dense_.logits[s]);
      const double density = c.counts[s].computed / c.counts[s].causal;
      const double gpu_density = g.counts[s].computed / std::max(g.counts[s].causal, 1.0);
      std::printf("%s seq %zu: GPU vs CPU sparse %.4g, CPU sparse vs dense %.4g, density %.3f (GPU %.3f)\n", name, s,
                  e, gap, density, gpu_density);
      RecordProperty(std::string(name) + "_seq" + std::to_string(s) + "_gpu_vs_cpu_sparse", std::to_string(e));
      EXPECT_GT(gap, 5 * scale_);  // the plan really is sparse: the bounds discriminate
      EXPECT_LT(density, 0.8);
      EXPECT_EQ(g.counts[s].causal, c.counts[s].causal);
      if (same_decisions) {
        EXPECT_LE(e, 1.5 * scale_);
        EXPECT_EQ(g.counts[s].computed, c.counts[s].computed);
      } else {
        EXPECT_LT(e, 0.5 * gap);
        EXPECT_NEAR(gpu_density, density, 0.02);
      }
    }
  }

  std::unique_ptr<Models> m_;
  std::vector<std::vector<int32_t>> prompts_;
  Result gpu_dense_, cpu_dense_;
  double scale_ = 0;
};

TEST_F(CudaSparsePrefillDecoder, AllBlocksPlansEqualDense) {
  GridParams every = slash_grid();
  every.stride = 2;  // band +-1 of 2 groups: every causal block (device-planned path)
  SparsePrefillConfig ashape;
  ashape.method = SparsePrefillMethod::AShape;  // host-plan path
  ashape.min_prompt_len = 0;
  ashape.n_local = 1 << 20;
  for (const auto& [name, cfg] : {std::pair<const char*, SparsePrefillConfig>{"grid stride 2", grid_config(every)},
                                  {"a_shape unbounded", ashape}}) {
    const Result g = m_->run(true, {prompts_[0]}, cfg);
    const double e = err(g.logits[0], gpu_dense_.logits[0]);
    std::printf("%s: GPU all-blocks sparse vs GPU dense %.4g (density %.3f)\n", name, e,
                g.counts[0].computed / g.counts[0].causal);
    EXPECT_LE(e, scale_) << name;
    EXPECT_GE(g.counts[0].computed, g.counts[0].causal) << name;  // every causal block (permuted blocks may straddle)
  }
}

TEST_F(CudaSparsePrefillDecoder, DevicePlannedGridMatchesCpu) {
  expect_matches_cpu(grid_config(slash_grid()), 1, "grid_slash16");
}

TEST_F(CudaSparsePrefillDecoder, DevicePlannedMMInferenceDefaultMatchesCpu) {
  SparsePrefillConfig cfg;
  cfg.method = SparsePrefillMethod::MMInference;  // default head: grid, online search
  cfg.min_prompt_len = 0;
  expect_matches_cpu(cfg, 1, "mminference_default", /*same_decisions=*/false);
}

TEST_F(CudaSparsePrefillDecoder, MixedHeadsHostPlansMatchCpu) {
  auto pats = std::make_shared<SparseHeadPatterns>();
  for (int l = 0; l < kL; ++l) {
    std::vector<HeadPattern> heads(kH);
    heads[0].grid = heads[3].grid = slash_grid();
    heads[1].type = HeadPatternType::AShape;
    heads[1].n_init = 64;
    heads[1].n_local = 256;
    heads[2].type = l % 2 ? HeadPatternType::Dense : HeadPatternType::AShape;
    heads[2].n_init = 64;
    heads[2].n_local = 512;
    pats->layers.push_back(heads);
  }
  SparsePrefillConfig cfg;
  cfg.method = SparsePrefillMethod::MMInference;
  cfg.min_prompt_len = 0;
  cfg.head_patterns = pats;
  expect_matches_cpu(cfg, 1, "mminference_mixed_heads");
}

TEST_F(CudaSparsePrefillDecoder, TwoSparseSequencesHostPlansMatchCpu) {
  expect_matches_cpu(grid_config(slash_grid()), 2, "grid_slash16_two_sequences");
}

// grid_search_once: the first chunk searches and fills the sequence's store (every layer, every
// head); later chunks plan from the store. A store filled beforehand with stride-16 slash-only
// layouts makes an online-search config plan exactly like the fixed stride-16 grid (no search
// ran: the online search would have chosen on the data). Also prints the error against dense of
// MMInference's default head searched once per prompt beside searched per chunk.
TEST_F(CudaSparsePrefillDecoder, GridSearchOnceReusesTheStoredLayouts) {
  const SparsePrefillConfig once = search_once_config();
  std::vector<GridLayoutStore> stores(1);
  stores[0].layers.assign(kL, std::vector<GridLayout>(kH, fixed_grid_layout(16, 0, once.grid)));
  const Result g = m_->run(true, {prompts_[0]}, once, &stores);
  const Result fixed = m_->run(true, {prompts_[0]}, grid_config(slash_grid()));
  const double e = err(g.logits[0], fixed.logits[0]);
  std::printf("stored stride-16 layouts vs fixed stride 16: %.4g (density %.3f vs %.3f)\n", e,
              g.counts[0].computed / g.counts[0].causal, fixed.counts[0].computed / fixed.counts[0].causal);
  EXPECT_LE(e, scale_);
  EXPECT_EQ(g.counts[0].computed, fixed.counts[0].computed);
  EXPECT_GT(err(g.logits[0], gpu_dense_.logits[0]), 5 * scale_);  // sparse, so the bound discriminates

  SparsePrefillConfig mm;
  mm.method = SparsePrefillMethod::MMInference;
  mm.min_prompt_len = 0;
  mm.grid_search_once = false;
  const Result per_chunk = m_->run(true, {prompts_[0]}, mm);
  mm.grid_search_once = true;
  std::vector<GridLayoutStore> fresh(1);
  const Result searched_once = m_->run(true, {prompts_[0]}, mm, &fresh);
  ASSERT_EQ(fresh[0].layers.size(), static_cast<size_t>(kL));
  for (const auto& layer : fresh[0].layers) {
    ASSERT_EQ(layer.size(), static_cast<size_t>(kH));
    for (const GridLayout& l : layer) EXPECT_GE(l.stride, 1);
  }
  const double e_once = err(searched_once.logits[0], gpu_dense_.logits[0]);
  const double e_chunk = err(per_chunk.logits[0], gpu_dense_.logits[0]);
  std::printf("MMInference default vs GPU dense: searched once %.4g (density %.3f), every chunk %.4g (density %.3f)\n",
              e_once, searched_once.counts[0].computed / searched_once.counts[0].causal, e_chunk,
              per_chunk.counts[0].computed / per_chunk.counts[0].causal);
  RecordProperty("mminference_once_vs_dense", std::to_string(e_once));
  RecordProperty("mminference_per_chunk_vs_dense", std::to_string(e_chunk));
  EXPECT_LT(searched_once.counts[0].computed, searched_once.counts[0].causal);
}

// The next layer's plan built ahead on a second stream (set_sparse_plan_ahead, the default) runs
// the same plans as built inline: from a store whose layouts differ by layer (stride 16 or 32,
// phases by layer: the two plan buffers alternate by layer parity), the logits are equal bit for
// bit and the block counts equal, on and off.
TEST_F(CudaSparsePrefillDecoder, PlanAheadEqualsPlanInline) {
  const SparsePrefillConfig once = search_once_config();
  std::vector<GridLayoutStore> stores(1);
  for (int l = 0; l < kL; ++l)
    stores[0].layers.push_back(std::vector<GridLayout>(kH, fixed_grid_layout(l % 2 ? 32 : 16, l, once.grid)));
  set_sparse_plan_ahead(false);
  const Result in_line = m_->run(true, {prompts_[0]}, once, &stores);
  set_sparse_plan_ahead(true);
  const Result ahead = m_->run(true, {prompts_[0]}, once, &stores);
  ASSERT_EQ(in_line.logits[0].size(), ahead.logits[0].size());
  size_t differ = 0;
  for (size_t i = 0; i < ahead.logits[0].size(); ++i) differ += in_line.logits[0][i] != ahead.logits[0][i];
  EXPECT_EQ(differ, 0u);
  EXPECT_EQ(in_line.counts[0].computed, ahead.counts[0].computed);
  EXPECT_EQ(in_line.counts[0].causal, ahead.counts[0].causal);
  EXPECT_GT(err(ahead.logits[0], gpu_dense_.logits[0]), 5 * scale_);  // sparse: the plans matter
}

// XAttention (estimated on the GPU: CudaXAttentionPrefill). Threshold 1 equals dense. A threshold
// of 1e-6 keeps exactly the sink, diagonal and dense-tail blocks whatever the scores: GPU and CPU
// must make the same plans, so method xattention on the device-planned path, two sparse
// sequences (host plans) and an MMInference file mixing xattention heads (two parameter sets)
// with grid and dense heads (host plans, the xattention ones downloaded) match the CPU within the
// rounding scale with equal block counts. Score-dependent selections (threshold 0.3) are equal
// to the CPU's on equal scores (test_cuda_xattention); here the GPU's bf16 model and the CPU's
// f32 one give slightly different scores, and a random model's diffuse attention puts many
// blocks at the cut (measured on the H100: logits 0.89 from the CPU's sparse ones, 1.53 sparse
// vs dense, density 0.410 both): only the density is compared (within 0.02) and the errors printed.
SparsePrefillConfig xattention_config(float threshold) {
  SparsePrefillConfig c;
  c.method = SparsePrefillMethod::XAttention;
  c.min_prompt_len = 0;
  c.xattention.threshold = threshold;
  return c;
}

TEST_F(CudaSparsePrefillDecoder, XAttentionMatchesCpu) {
  const Result all = m_->run(true, {prompts_[0]}, xattention_config(1.0f));
  EXPECT_LE(err(all.logits[0], gpu_dense_.logits[0]), scale_) << "threshold 1: every causal block";
  EXPECT_EQ(all.counts[0].computed, all.counts[0].causal);
  expect_matches_cpu(xattention_config(1e-6f), 1, "xattention_sink_diagonal");
  expect_matches_cpu(xattention_config(1e-6f), 2, "xattention_sink_diagonal_two_sequences");
  auto pats = std::make_shared<SparseHeadPatterns>();
  for (int l = 0; l < kL; ++l) {
    std::vector<HeadPattern> heads(kH);
    heads[0].grid = slash_grid();
    heads[1].type = heads[3].type = HeadPatternType::XAttention;
    heads[1].xattention.threshold = 1e-6f;
    heads[3].xattention.threshold = 1e-7f;
    heads[3].xattention.stride = 16;
    heads[2].type = HeadPatternType::Dense;
    pats->layers.push_back(heads);
  }
  SparsePrefillConfig mm;
  mm.method = SparsePrefillMethod::MMInference;
  mm.min_prompt_len = 0;
  mm.head_patterns = pats;
  expect_matches_cpu(mm, 1, "mminference_with_xattention_heads");
  const Result g = m_->run(true, {prompts_[0]}, xattention_config(0.3f)),
               c = m_->run(false, {prompts_[0]}, xattention_config(0.3f));
  const double density = c.counts[0].computed / c.counts[0].causal, gpu_density = g.counts[0].computed / g.counts[0].causal;
  std::printf("xattention 0.3: GPU vs CPU sparse %.4g, CPU sparse vs dense %.4g, density %.3f (GPU %.3f)\n",
              err(g.logits[0], c.logits[0]), err(c.logits[0], cpu_dense_.logits[0]), density, gpu_density);
  EXPECT_LT(density, 0.8);
  EXPECT_NEAR(gpu_density, density, 0.02);
}

}  // namespace
}  // namespace vlm::testing

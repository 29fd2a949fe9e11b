// SinkRouter through the GPU decoder (CudaDecoder + CudaSinkRouterStep) against the CPU decoder
// (SinkRouterAttention) on the same batches: a random f32 Qwen2-shaped model with head size 64
// (so the GPU's split-K decode kernel runs; the fixture models' heads are smaller), two
// sequences prefilled with their anchor stores, then decode steps with tau(L) giving no, every
// and some sink groups, zero and anchor-value surrogates: the per-sequence routed/skipped counts
// and the engine counters equal the CPU's, and the logits agree to 1e-4 (relative, per row).
// Skips without a GPU.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "engine/cuda/cuda_backend.h"
#include "kernels/sink_router/sink_router_config.h"
#include "model/decoder/safetensors.h"
#include "model/methods/sink_anchors.h"
#include "tests/support/decoder_harness.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

constexpr int kC = 256, kI = 256, kL = 4, kH = 4, kHkv = 2, kD = 64, kV = 512, kB = 16;

// A random Qwen2 checkpoint with head size 64 in a temporary directory.
std::string write_model() {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("vlm_sink_gpu_" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json")
      << R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 512, "hidden_size": 256,
           "intermediate_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
           "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
           "tie_word_embeddings": true, "hidden_act": "silu"})";
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.f, 0.08f);
  std::map<std::string, std::vector<float>> data;
  std::map<std::string, TensorView> views;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool ones = false) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    auto& v = data[name];
    v.resize(static_cast<size_t>(n));
    for (float& x : v) x = ones ? 1.f : nd(rng);
    Shape sh;
    for (int64_t s : shape) sh.dims[sh.ndim++] = s;
    views.emplace(name, TensorView(v.data(), DType::F32, sh));
  };
  add("model.embed_tokens.weight", {kV, kC});
  add("model.norm.weight", {kC}, true);
  for (int l = 0; l < kL; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {kC}, true);
    add(p + "post_attention_layernorm.weight", {kC}, true);
    add(p + "self_attn.q_proj.weight", {kH * kD, kC});
    add(p + "self_attn.k_proj.weight", {kHkv * kD, kC});
    add(p + "self_attn.v_proj.weight", {kHkv * kD, kC});
    add(p + "self_attn.q_proj.bias", {kH * kD});
    add(p + "self_attn.k_proj.bias", {kHkv * kD});
    add(p + "self_attn.v_proj.bias", {kHkv * kD});
    add(p + "self_attn.o_proj.weight", {kC, kH * kD});
    add(p + "mlp.gate_proj.weight", {kI, kC});
    add(p + "mlp.up_proj.weight", {kI, kC});
    add(p + "mlp.down_proj.weight", {kC, kI});
  }
  write_safetensors(dir + "/model.safetensors", views);
  return dir;
}

struct SinkRun {
  std::vector<std::vector<int32_t>> tokens;  // per sequence
  std::vector<std::vector<int32_t>> tables;
  std::vector<SinkAnchors> stores;
  SinkRouterCounters counters;
};

TEST(CudaSinkRouterDecoder, DecisionsCountsAndLogitsEqualTheCpus) {
  VLM_REQUIRE_GPU();
  const std::string dir = write_model();
  auto decoder = LlmDecoder::load(dir);
  ASSERT_EQ(decoder->config().head_dim, kD);
  const int64_t num_blocks = 32;
  CudaDecoderOptions o;
  o.dtype = DType::F32;
  o.num_kv_blocks = num_blocks;
  o.max_tokens_per_step = 256;
  CudaBackend gpu(*decoder, o, {});
  std::vector<float> kbuf(static_cast<size_t>(kL) * num_blocks * kHkv * kB * kD), vbuf(kbuf.size());
  std::vector<PagedKVLayer> cpu_kv;
  for (int l = 0; l < kL; ++l) {
    const size_t off = static_cast<size_t>(l) * num_blocks * kHkv * kB * kD;
    cpu_kv.push_back(PagedKVLayer{kbuf.data() + off, vbuf.data() + off, DType::F32, num_blocks, kB, kHkv, kD});
  }
  struct Cfg { double tau; SinkSurrogate sur; };
  // tau 1.01: nothing routes; -1: every routed group is a sink; 0 and 0.1: some are.
  for (const Cfg& cc : {Cfg{1.01, SinkSurrogate::Zero}, Cfg{-1.0, SinkSurrogate::Zero}, Cfg{0.0, SinkSurrogate::Zero},
                        Cfg{0.1, SinkSurrogate::AnchorValue}}) {
    SCOPED_TRACE(::testing::Message() << "tau=" << cc.tau << " surrogate=" << sink_surrogate_name(cc.sur));
    SinkRouterConfig cfg;
    cfg.c0 = cc.tau;
    cfg.surrogate = cc.sur;
    SinkRun cpu, dev;
    for (SinkRun* r : {&cpu, &dev}) {
      r->tokens = {{}, {}};
      for (int i = 0; i < 40; ++i) r->tokens[0].push_back((7 * i + 3) % kV);
      for (int i = 0; i < 70; ++i) r->tokens[1].push_back((11 * i + 5) % kV);
      r->tables = {{3, 9, 1, 12}, {20, 5, 17, 8, 30, 2}};
      r->stores.resize(2);
    }
    int64_t routed_rows = 0;
    for (int step = 0; step < 5; ++step) {
      std::vector<float> lc, lg;
      std::vector<SequenceChunk> chunks(2);
      for (int s = 0; s < 2; ++s) {
        const auto& t = cpu.tokens[static_cast<size_t>(s)];
        const int32_t start = step == 0 ? 0 : static_cast<int32_t>(t.size()) - 1;
        chunks[s].token_ids = std::span<const int32_t>(t.data() + start, t.size() - static_cast<size_t>(start));
        chunks[s].start_pos = start;
        chunks[s].block_table = cpu.tables[static_cast<size_t>(s)];
        chunks[s].finishes_prefill = step == 0;
      }
      if (step > 0) routed_rows += 2;
      for (SinkRun* r : {&cpu, &dev}) {
        ForwardBatch fb = make_forward_batch(chunks, kB);
        fb.sink_anchors = {&r->stores[0], &r->stores[1]};
        fb.sink_router = &cfg;
        fb.sink_counters = &r->counters;
        if (r == &cpu) {
          decoder->forward(fb, cpu_kv, lc);
        } else {
          gpu.forward(fb, EmbeddingOverride{});
          gpu.decoder().download_logits(lg);  // synchronizes
          gpu.decoder().settle_methods();
        }
      }
      ASSERT_EQ(lc.size(), lg.size());
      EXPECT_LE(max_row_rel_error(lg.data(), lc.data(), 2, kV), 1e-4) << "step " << step;
      for (int s = 0; s < 2; ++s) {  // the CPU's greedy token feeds both
        const float* row = lc.data() + static_cast<size_t>(s) * kV;
        const int32_t next = static_cast<int32_t>(std::max_element(row, row + kV) - row);
        for (SinkRun* r : {&cpu, &dev}) r->tokens[static_cast<size_t>(s)].push_back(next);
      }
    }
    for (int s = 0; s < 2; ++s) {
      EXPECT_EQ(dev.stores[s].groups_routed, cpu.stores[s].groups_routed) << "sequence " << s;
      EXPECT_EQ(dev.stores[s].groups_skipped, cpu.stores[s].groups_skipped) << "sequence " << s;
    }
    EXPECT_EQ(cpu.counters.groups_routed, routed_rows * (kL - cfg.num_dense_layers) * kHkv);
    EXPECT_EQ(dev.counters.groups_routed, cpu.counters.groups_routed);
    EXPECT_EQ(dev.counters.groups_skipped, cpu.counters.groups_skipped);
    EXPECT_EQ(dev.counters.kv_bytes_skipped, cpu.counters.kv_bytes_skipped);
    if (cc.tau > 1) EXPECT_EQ(cpu.counters.groups_skipped, 0);
    if (cc.tau < 0 && cc.tau <= -1) EXPECT_EQ(cpu.counters.groups_skipped, cpu.counters.groups_routed);
    std::fprintf(stderr, "[ sink decoder ] tau %.2f: %ld of %ld groups skipped (CPU and GPU)\n", cc.tau,
                 static_cast<long>(dev.counters.groups_skipped), static_cast<long>(dev.counters.groups_routed));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace vlm::testing

// The methods through the GPU decoder against the CPU decoder on the same batches, on a random
// f32 Qwen2-shaped model with head size 64 (the fixture models' heads are smaller than the GPU
// decode kernel's):
// LOOK-M (CudaLookMStep against run_look_m): a prompt prefilled in two chunks with a LookMState
// (window and full scores, pivot and weighted merges, text prior with an image span): the
// downloaded scores equal the CPU's within f32 rounding, the compressed length is the CPU's, and
// the decode steps over the compacted caches (positions continuing from the prompt's length) give
// the CPU's logits to 1e-4.
// SinkRouter (CudaDecoder + CudaSinkRouterStep against SinkRouterAttention): a random f32 Qwen2-shaped model with head size 64
// (so the GPU's split-K decode kernel runs; the fixture models' heads are smaller), two
// sequences prefilled with their anchor stores, then decode steps with tau(L) giving no, every
// and some sink groups, zero and anchor-value surrogates: the per-sequence routed/skipped counts
// and the engine counters equal the CPU's, and the logits agree to 1e-4 (relative, per row); the
// decode steps after the first replay a CUDA graph.
// SinkRouter and LOOK-M together on one request (the GPU's anchors are captured at the end of
// prefill, before LOOK-M's compaction, as the CPU's): two requests one after the other, each
// prefilled in two chunks and compacted by LOOK-M, then decode steps with SinkRouter at a threshold
// that splits the CPU's scores (found by a CPU-only pass first): the first decode steps probed
// (eager; every routed layer's group scores within 1e-4 of the CPU's and the decisions equal), the
// others plain (CUDA graphs; the second request's replay the graph the first one captured, so a
// replay routes on the new sequence's anchors): per-step skip counts equal the CPU's, logits to 1e-4.
// The compaction does rewrite the first slot here (checked), so anchors read from the cache's
// first entry would route differently.
// SinkRouter calibration (vlm-calibrate-sink --device cuda): the samples recorded on the GPU
// decoder (scores, and first-token masses measured on the device) equal the CPU recording's.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>

#include "engine/cuda/cuda_backend.h"
#include "kernels/sink_router/first_token_kv.h"
#include "kernels/sink_router/sink_router_config.h"
#include "model/methods/look_m_state.h"
#include "model/methods/sink_anchors.h"
#include "tests/support/decoder_harness.h"
#include "tests/support/gpu_test.h"
#include "tests/support/random_qwen2.h"
#include "tools/vlm-calibrate-sink/calibration_run.h"

namespace vlm::testing {
namespace {

constexpr int kC = 256, kI = 256, kL = 4, kH = 4, kHkv = 2, kD = 64, kV = 512, kB = 16;

// A random Qwen2 checkpoint with head size 64 in a temporary directory.
std::string write_model() {
  RandomQwen2 m{.hidden = kC, .intermediate = kI, .layers = kL, .heads = kH, .kv_heads = kHkv, .vocab = kV};
  m.seed = 4;
  return write_random_qwen2("vlm_sink_gpu", m);
}

struct SinkRun {
  std::vector<std::vector<int32_t>> tokens;  // per sequence
  std::vector<std::vector<int32_t>> tables;
  std::vector<SinkAnchors> stores;
  SinkRouterCounters counters;
};

// The model, a GPU backend and a CPU cache of the same block count.
struct Pair {
  std::string dir = write_model();
  std::unique_ptr<LlmDecoder> decoder = LlmDecoder::load(dir);
  static constexpr int64_t num_blocks = 32;
  std::unique_ptr<CudaBackend> gpu;
  std::vector<float> kbuf, vbuf;
  std::vector<PagedKVLayer> cpu_kv;
  Pair() {
    CudaDecoderOptions o;
    o.dtype = DType::F32;
    o.num_kv_blocks = num_blocks;
    o.max_tokens_per_step = 256;
    gpu = std::make_unique<CudaBackend>(*decoder, o, std::vector<int32_t>{});
    kbuf.assign(static_cast<size_t>(kL) * num_blocks * kHkv * kB * kD, 0.f);
    vbuf.assign(kbuf.size(), 0.f);
    for (int l = 0; l < kL; ++l) {
      const size_t off = static_cast<size_t>(l) * num_blocks * kHkv * kB * kD;
      cpu_kv.push_back(PagedKVLayer{kbuf.data() + off, vbuf.data() + off, DType::F32, num_blocks, kB, kHkv, kD});
    }
  }
  ~Pair() { std::filesystem::remove_all(dir); }
  // Runs fb on both (the GPU after `gpu_setup`), logits of its rows into lc / lg.
  void run(ForwardBatch cpu_fb, ForwardBatch gpu_fb, std::vector<float>& lc, std::vector<float>& lg) {
    decoder->forward(cpu_fb, cpu_kv, lc);
    gpu->forward(gpu_fb, EmbeddingOverride{});
    gpu->decoder().download_logits(lg);  // synchronizes
    gpu->decoder().settle_methods();
  }
};

TEST(CudaLookMDecoder, ScoresCompactionAndDecodeEqualTheCpus) {
  VLM_REQUIRE_GPU();
  Pair m;
  const int32_t L = 150;
  std::vector<int32_t> prompt;
  for (int i = 0; i < L; ++i) prompt.push_back((13 * i + 1) % kV);
  std::vector<ModalityTag> tags(L);
  for (int i = 30; i < 110; ++i) tags[i].modality = Modality::Image;  // an image span
  const std::vector<int32_t> table = {4, 11, 0, 7, 19, 2, 25, 9, 14, 30, 5};  // 11 blocks: 176 slots
  struct Mode { const char* name; LookMScores scores; };
  for (const Mode& md : {Mode{"text-prior-pivot", LookMScores::Window}, Mode{"text-prior-weighted", LookMScores::Full},
                         Mode{"avg", LookMScores::Full}}) {
    SCOPED_TRACE(md.name);
    LookMParams p = *look_m_mode_from_name(md.name);
    p.scores = md.scores;
    p.window = 24;
    LookMState cs(p, kL, kHkv, L, tags), gs(p, kL, kHkv, L, tags);
    gs.host_scores();  // the GPU's scores back to the host at the end of prefill
    std::vector<float> lc, lg;
    for (int32_t start : {0, 90}) {  // two prefill chunks
      SequenceChunk c;
      const int32_t end = start == 0 ? 90 : L;
      c.token_ids = std::span<const int32_t>(prompt.data() + start, static_cast<size_t>(end - start));
      c.start_pos = start;
      c.block_table = table;
      c.finishes_prefill = end == L;
      ForwardBatch a = make_forward_batch(std::vector<SequenceChunk>{c}, kB), b = a;
      a.look_m = {&cs};
      b.look_m = {&gs};
      m.run(std::move(a), std::move(b), lc, lg);
      EXPECT_LE(max_row_rel_error(lg.data(), lc.data(), 1, kV), 1e-4) << "prefill chunk at " << start;
    }
    double worst = 0;
    for (size_t i = 0; i < cs.scores.size(); ++i)
      worst = std::max(worst, std::abs(double(gs.scores[i]) - cs.scores[i]) / std::max(1.0, std::abs(double(cs.scores[i]))));
    EXPECT_LE(worst, 2e-5);
    ASSERT_EQ(gs.compressed_len, cs.compressed_len);
    const int32_t C = cs.compressed_len;
    EXPECT_EQ(C, look_m_budget(p, L).kept());
    ASSERT_LT(C, L);
    // Decode over the compacted caches: cache slots [0, C), positions from L on.
    int32_t token = 77;
    for (int k = 0; k < 3; ++k) {
      SequenceChunk c;
      c.token_ids = std::span<const int32_t>(&token, 1);
      c.start_pos = C + k;
      c.block_table = table;
      ForwardBatch a = make_forward_batch(std::vector<SequenceChunk>{c}, kB);
      a.positions[0] = L + k;
      m.run(a, a, lc, lg);
      EXPECT_LE(max_row_rel_error(lg.data(), lc.data(), 1, kV), 1e-4) << "decode step " << k;
      token = static_cast<int32_t>(std::max_element(lc.begin(), lc.end()) - lc.begin());
    }
    std::fprintf(stderr, "[ look-m decoder ] %s: %d of %d tokens kept, score error %.2e\n", md.name, C, L, worst);
  }
}

TEST(CudaSinkRouterDecoder, DecisionsCountsAndLogitsEqualTheCpus) {
  VLM_REQUIRE_GPU();
  Pair m;
  auto& decoder = m.decoder;
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
    const int64_t launches0 = m.gpu->decoder().graph_launches();
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
          decoder->forward(fb, m.cpu_kv, lc);
        } else {
          m.gpu->forward(fb, EmbeddingOverride{});
          m.gpu->decoder().download_logits(lg);  // synchronizes
          m.gpu->decoder().settle_methods();
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
    // Decode steps 2-4 replay the graph step 1 captured (this config is part of its key).
    EXPECT_EQ(m.gpu->decoder().graph_launches() - launches0, 3);
    if (cc.tau > 1) EXPECT_EQ(cpu.counters.groups_skipped, 0);
    if (cc.tau < 0 && cc.tau <= -1) EXPECT_EQ(cpu.counters.groups_skipped, cpu.counters.groups_routed);
    std::fprintf(stderr, "[ sink decoder ] tau %.2f: %ld of %ld groups skipped (CPU and GPU)\n", cc.tau,
                 static_cast<long>(dev.counters.groups_skipped), static_cast<long>(dev.counters.groups_routed));
  }
}

// A sequence's routed rows in call order: layer, group scores and decisions.
struct RowRecorder : SinkRouterProbe {
  std::vector<int> layers;
  std::vector<float> scores;
  std::vector<uint8_t> skip;
  void on_routed_row(const SinkRoutedRow& r) override {
    layers.push_back(r.layer);
    scores.insert(scores.end(), r.scores, r.scores + kHkv);
    skip.insert(skip.end(), r.skip, r.skip + kHkv);
  }
};

// One backend's state of one request with both methods.
struct MethodsSide {
  std::unique_ptr<LookMState> look;
  SinkAnchors store;
  RowRecorder rec;
  SinkRouterCounters counters;
  std::vector<int64_t> step_skips;  // per decode step
};

TEST(CudaMethodsDecoder, SinkRouterWithLookMRoutesOnTheAnchorsFromBeforeTheCompaction) {
  VLM_REQUIRE_GPU();
  Pair m;
  struct Request { std::vector<int32_t> prompt, table; };
  std::vector<Request> reqs(2);
  for (int i = 0; i < 150; ++i) reqs[0].prompt.push_back((13 * i + 1) % kV);
  for (int i = 0; i < 130; ++i) reqs[1].prompt.push_back((31 * i + 17) % kV);
  reqs[0].table = {4, 11, 0, 7, 19, 2, 25, 9, 14, 30, 5};  // 176 slots each, disjoint
  reqs[1].table = {1, 3, 6, 8, 10, 12, 13, 15, 16, 17, 18};
  LookMParams lp = *look_m_mode_from_name("text-prior-weighted");
  lp.scores = LookMScores::Full;
  lp.window = 24;
  SinkRouterConfig cfg;
  cfg.surrogate = SinkSurrogate::AnchorValue;
  constexpr int kProbed = 2, kGraphed = 4;
  // One request: prefill (chunks at 0 and 90, LOOK-M compacting at the end), then decode steps
  // fed the CPU's greedy tokens; the GPU side (gpu not null) runs every step beside the CPU.
  auto serve = [&](const Request& r, MethodsSide& cpu, MethodsSide* gpu, bool probe_all) {
    const int32_t L = static_cast<int32_t>(r.prompt.size());
    std::vector<ModalityTag> tags(static_cast<size_t>(L));
    for (int i = 30; i < 80; ++i) tags[static_cast<size_t>(i)].modality = Modality::Image;
    for (MethodsSide* sd : {&cpu, gpu})
      if (sd) sd->look = std::make_unique<LookMState>(lp, kL, kHkv, L, tags);
    auto batch = [&](const SequenceChunk& c, MethodsSide& sd, bool prefill) {
      ForwardBatch fb = make_forward_batch(std::vector<SequenceChunk>{c}, kB);
      if (prefill) fb.look_m = {sd.look.get()};
      fb.sink_anchors = {&sd.store};
      fb.sink_router = &cfg;
      fb.sink_counters = &sd.counters;
      return fb;
    };
    std::vector<float> lc, lg;
    auto step = [&](const SequenceChunk& c, bool prefill, int32_t position, const char* what) {
      ForwardBatch a = batch(c, cpu, prefill);
      if (!prefill) a.positions[0] = position;
      if (gpu == nullptr) return m.decoder->forward(a, m.cpu_kv, lc);
      ForwardBatch b = batch(c, *gpu, prefill);
      if (!prefill) b.positions[0] = position;
      m.run(std::move(a), std::move(b), lc, lg);
      EXPECT_LE(max_row_rel_error(lg.data(), lc.data(), 1, kV), 1e-4) << what;
    };
    for (int32_t start : {0, 90}) {
      SequenceChunk c;
      const int32_t end = start == 0 ? 90 : L;
      c.token_ids = std::span<const int32_t>(r.prompt.data() + start, static_cast<size_t>(end - start));
      c.start_pos = start;
      c.block_table = r.table;
      c.finishes_prefill = end == L;
      step(c, true, 0, "prefill");
    }
    const int32_t C = cpu.look->compressed_len;
    ASSERT_LT(C, L);
    // The compaction rewrote the first slot (so routing on the cache's first entry would differ).
    std::vector<float> k0(kHkv * kD), v0(kHkv * kD);
    double moved = 0;
    for (int l = cfg.num_dense_layers; l < kL; ++l) {
      load_first_token_kv(m.cpu_kv[static_cast<size_t>(l)], r.table[0], k0.data(), v0.data());
      for (int i = 0; i < kHkv * kD; ++i) moved = std::max(moved, double(std::abs(k0[i] - cpu.store.k_layer(l)[i])));
    }
    EXPECT_GT(moved, 1e-2) << "LOOK-M kept the first slot: the test would not tell the anchors apart";
    if (gpu) ASSERT_EQ(gpu->look->compressed_len, C);
    int32_t token = 77;
    for (int k = 0; k < kProbed + kGraphed; ++k) {
      SCOPED_TRACE(::testing::Message() << "decode step " << k);
      for (MethodsSide* sd : {&cpu, gpu})
        if (sd) {
          sd->store.probe = sd == &cpu || probe_all || k < kProbed ? &sd->rec : nullptr;
          sd->step_skips.push_back(-sd->store.groups_skipped);
        }
      SequenceChunk c;
      c.token_ids = std::span<const int32_t>(&token, 1);
      c.start_pos = C + k;
      c.block_table = r.table;
      step(c, false, L + k, "decode");
      for (MethodsSide* sd : {&cpu, gpu})
        if (sd) sd->step_skips.back() += sd->store.groups_skipped;
      token = static_cast<int32_t>(std::max_element(lc.begin(), lc.end()) - lc.begin());
    }
    for (MethodsSide* sd : {&cpu, gpu})
      if (sd) sd->store.probe = nullptr;
  };

  // The threshold: routing changes the later layers' queries and the tokens, so it is found by
  // CPU-only passes: tau in the middle of the widest gap between the last pass's scores (in their
  // middle half), until a pass under that tau skips some groups but not all and has no score
  // within 1e-3 of it (then the GPU's scores, within 1e-4 of the CPU's, decide alike).
  cfg.c0 = 1.01;  // the first pass skips nothing
  bool found = false;
  for (int pass = 0; pass < 8 && !found; ++pass) {
    std::vector<float> all;
    int64_t skipped = 0, routed = 0;
    for (const Request& r : reqs) {
      MethodsSide dry;
      serve(r, dry, nullptr, true);
      all.insert(all.end(), dry.rec.scores.begin(), dry.rec.scores.end());
      skipped += dry.store.groups_skipped;
      routed += dry.store.groups_routed;
    }
    double margin = 1;
    for (float x : all) margin = std::min(margin, std::abs(double(x) - cfg.c0));
    found = skipped > 0 && skipped < routed && margin > 1e-3;
    if (found) break;
    std::sort(all.begin(), all.end());
    double gap = 0;
    for (size_t i = all.size() / 4; i + 1 < all.size() * 3 / 4; ++i)
      if (all[i + 1] - all[i] > gap) {
        gap = all[i + 1] - all[i];
        cfg.c0 = 0.5 * (double(all[i]) + all[i + 1]);
      }
  }
  ASSERT_TRUE(found) << "no threshold splitting the CPU's scores cleanly";

  for (size_t i = 0; i < reqs.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "request " << i);
    MethodsSide cpu, gpu;
    const int64_t launches0 = m.gpu->decoder().graph_launches();
    serve(reqs[i], cpu, &gpu, false);
    // The probed (eager) steps: each routed row's scores and decisions are the CPU's (the CPU
    // records every step: its probe changes nothing).
    const size_t rows = size_t(kProbed * (kL - cfg.num_dense_layers));
    ASSERT_EQ(cpu.rec.layers.size(), rows * (kProbed + kGraphed) / kProbed);
    ASSERT_EQ(gpu.rec.layers.size(), rows);
    EXPECT_TRUE(std::equal(gpu.rec.layers.begin(), gpu.rec.layers.end(), cpu.rec.layers.begin()));
    double worst = 0;
    for (size_t j = 0; j < gpu.rec.scores.size(); ++j)
      worst = std::max(worst, double(std::abs(gpu.rec.scores[j] - cpu.rec.scores[j])));
    EXPECT_LE(worst, 1e-4);
    EXPECT_TRUE(std::equal(gpu.rec.skip.begin(), gpu.rec.skip.end(), cpu.rec.skip.begin()));
    // Every step's decisions (the graphed ones included): the same number of sink groups.
    EXPECT_EQ(gpu.step_skips, cpu.step_skips);
    EXPECT_EQ(gpu.store.groups_routed, cpu.store.groups_routed);
    EXPECT_EQ(cpu.store.groups_routed, int64_t(kProbed + kGraphed) * (kL - cfg.num_dense_layers) * kHkv);
    EXPECT_EQ(gpu.counters.groups_skipped, cpu.counters.groups_skipped);
    EXPECT_EQ(gpu.counters.kv_bytes_skipped, cpu.counters.kv_bytes_skipped);
    // Request 0 captures the graph at its first plain step and replays it after; request 1 (same
    // bucket and config) replays it at every plain step, on its own anchors.
    EXPECT_EQ(m.gpu->decoder().graph_launches() - launches0, i == 0 ? kGraphed - 1 : kGraphed);
    std::fprintf(stderr, "[ sink + look-m decoder ] request %zu: tau %.4f, %ld of %ld groups skipped (CPU and GPU), "
                 "score error %.2e\n", i, cfg.c0, static_cast<long>(gpu.store.groups_skipped),
                 static_cast<long>(gpu.store.groups_routed), worst);
  }
}

TEST(CudaSinkCalibration, SamplesEqualTheCpus) {
  VLM_REQUIRE_GPU();
  Pair m;
  CalibrationRunOptions opt;
  opt.lengths = {90, 300};
  opt.decode_steps = 3;
  opt.prefill_chunk = 128;
  opt.kv_dtype = DType::F32;
  std::vector<std::vector<int32_t>> prompts(2);
  for (int i = 0; i < 50; ++i) prompts[0].push_back((13 * i + 1) % kV);
  for (int i = 0; i < 70; ++i) prompts[1].push_back((29 * i + 7) % kV);
  const auto cpu = record_sink_samples(*m.decoder, prompts, opt);
  auto runner = make_cuda_calibration_runner(*m.decoder, opt);
  const auto gpu = record_sink_samples(*runner, m.decoder->config(), prompts, opt);
  ASSERT_EQ(gpu.size(), cpu.size());
  double score_err = 0, mass_err = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_EQ(gpu[i].context_len, cpu[i].context_len);
    // prompts x decode steps x routed layers x kv groups
    ASSERT_EQ(cpu[i].samples.size(), size_t(2 * 3 * (kL - opt.num_dense_layers) * kHkv));
    ASSERT_EQ(gpu[i].samples.size(), cpu[i].samples.size());
    for (size_t j = 0; j < cpu[i].samples.size(); ++j) {
      score_err = std::max(score_err, double(std::abs(gpu[i].samples[j].score - cpu[i].samples[j].score)));
      mass_err = std::max(mass_err, double(std::abs(gpu[i].samples[j].mass - cpu[i].samples[j].mass)));
    }
  }
  EXPECT_LE(score_err, 1e-4);
  EXPECT_LE(mass_err, 1e-4);
  std::fprintf(stderr, "[ sink calibration ] GPU against CPU: score error %.2e, mass error %.2e\n", score_err, mass_err);
}

}  // namespace
}  // namespace vlm::testing

// Sparse prefill attention time, dense vs each pattern, side by side in one run (not a Google
// Benchmark: each point runs once, the sizes are large). One sequence of S tokens, all queries,
// Qwen2-0.5B attention shapes (H=14, Hkv=2, D=64), f32 KV, cache block 16, shuffled blocks.
// Input is structured like real heads (sink keys, a rotary-like local band, far vertical keys)
// so the output error is meaningful. Per pattern: plan time (estimation included), kernel time,
// total, speedup over dense, kept-block density, relative L2 output error vs dense.
// Usage: bench_sparse_prefill [--video [--frame-tokens N]] [S ...]   (default 8192 16384 32768);
// VLM_BENCH_THREADS=n.
// --video: video-structured input instead (a 200-token text prefix, then frames of 256 tokens,
// Qwen2-VL's tokens per frame at 448x448: each spatial index carries its own direction, so a
// query attends the same spatial index in every earlier frame; 4 sink keys; one salient spatial
// index every query likes), and the patterns add grid, XAttention and MMInference.
// --frame-tokens N: frames of N tokens instead, e.g. 196 for LLaVA-OneVision / LLaVA-Video
// (384x384 SigLIP frames: 27x27 patches pooled 2x2 to 14x14; the 0.5B model's decoder is
// Qwen2-0.5B, the shapes above); MMInference gets N as its known stride.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench/common/pattern_filter.h"
#include "bench/common/shuffled_cache.h"
#include "kernels/attention/block_sparse_attention.h"
#include "kernels/attention/paged_attention.h"
#include "kernels/sparse_prefill/sparse_prefill_planner.h"
#include "kernels/core/thread_pool.h"

namespace {

constexpr int kH = 14, kHkv = 2, kD = 64, kB = 16;

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool g_video = false;
constexpr int kPrefix = 200, kSalient = 77;
int g_frame = 256;          // tokens per frame (--frame-tokens)
std::vector<float> g_dirs;  // [g_frame, 32] unit directions of the spatial indices

float video_structure(int pos, int d, bool is_key) {
  if (pos < kPrefix) return d < 8 && (!is_key || pos < 4) ? 2.5f : 0.0f;
  const int x = (pos - kPrefix) % g_frame;
  if (d < 8) return is_key ? (x == kSalient ? 2.0f : 0.0f) : 2.5f;
  if (d < 40) return 10.0f * g_dirs[x * 32 + d - 8];
  return 0.0f;
}

float structure(int pos, int d, bool is_key) {
  if (g_video) return video_structure(pos, d, is_key);
  if (d < 8) return !is_key || pos < 4 || pos % 1021 == 7 ? 2.5f : 0.0f;
  if (d < 40) {
    const int pair = (d - 8) / 2;
    const float angle = pos * 0.002f * static_cast<float>(1 + pair);
    return 1.5f * ((d % 2) ? std::sin(angle) : std::cos(angle));
  }
  return 0.0f;
}

struct Setup {
  std::mt19937 rng{42};
  vlm::bench::ShuffledCache cache;
  vlm::PagedKVLayer& kv = cache.kv;
  std::vector<int32_t>& table = cache.table;
  std::vector<float> q;
  int32_t cu[2], ctx[1];
  vlm::AttentionBatch batch;

  explicit Setup(int S) : cache(S, kB, kHkv, kD, vlm::DType::F32, rng) {
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    const int nb = static_cast<int>(table.size());
    const std::vector<int32_t>& slots = cache.slots;
    std::vector<float> k(static_cast<size_t>(S) * kHkv * kD), v(k.size());
    for (int j = 0; j < S; ++j) {
      for (int h = 0; h < kHkv; ++h)
        for (int d = 0; d < kD; ++d) {
          k[(static_cast<size_t>(j) * kHkv + h) * kD + d] = 0.5f * uni(rng) + structure(j, d, true);
          v[(static_cast<size_t>(j) * kHkv + h) * kD + d] = uni(rng);
        }
    }
    vlm::write_kv(kv, k.data(), v.data(), slots.data(), S);
    q.resize(static_cast<size_t>(S) * kH * kD);
    for (int i = 0; i < S; ++i)
      for (int h = 0; h < kH; ++h)
        for (int d = 0; d < kD; ++d) q[(static_cast<size_t>(i) * kH + h) * kD + d] = 0.5f * uni(rng) + structure(i, d, false);
    cu[0] = 0;
    cu[1] = S;
    ctx[0] = S;
    batch = {1, cu, ctx, table.data(), nb};
  }
};

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

}  // namespace

int main(int argc, char** argv) {
  const char* th = std::getenv("VLM_BENCH_THREADS");
  vlm::set_num_threads(th ? std::atoi(th) : 2);
  std::vector<int> lengths;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--video") g_video = true;
    else if (std::string(argv[i]) == "--frame-tokens" && i + 1 < argc) g_frame = std::atoi(argv[++i]);
    else lengths.push_back(std::atoi(argv[i]));
  }
  {
    std::mt19937 rng(5);
    std::normal_distribution<float> g(0, 1);
    if (g_frame <= kSalient) {
      std::fprintf(stderr, "--frame-tokens must exceed %d\n", kSalient);
      return 2;
    }
    g_dirs.resize(static_cast<size_t>(g_frame) * 32);
    for (int x = 0; x < g_frame; ++x) {
      double n = 0;
      for (int d = 0; d < 32; ++d) n += std::pow(g_dirs[x * 32 + d] = g(rng), 2);
      for (int d = 0; d < 32; ++d) g_dirs[x * 32 + d] /= static_cast<float>(std::sqrt(n));
    }
  }
  if (lengths.empty()) lengths = {8192, 16384, 32768};

  struct Pattern {
    std::string name;
    vlm::SparsePrefillConfig cfg;
  };
  std::vector<Pattern> patterns;
  {
    vlm::SparsePrefillConfig c;
    c.method = vlm::SparsePrefillMethod::AShape;
    patterns.push_back({"a_shape(128, 3968)", c});
    c.method = vlm::SparsePrefillMethod::TriShape;
    patterns.push_back({"tri_shape(128, 3968, last 100)", c});
    c.method = vlm::SparsePrefillMethod::VerticalSlash;
    patterns.push_back({"vertical_slash(1000, 6096)", c});
    c.vertical_size = 500;
    c.slash_size = 1024;
    patterns.push_back({"vertical_slash(500, 1024)", c});
    if (g_video) {
      vlm::SparsePrefillConfig x;
      x.method = vlm::SparsePrefillMethod::XAttention;
      x.xattention.threshold = 0.9f;
      patterns.push_back({"xattention(S 8, tau 0.9)", x});
      vlm::SparsePrefillConfig gcfg;
      gcfg.method = vlm::SparsePrefillMethod::Grid;
      patterns.push_back({"grid(stride search 16..1024, band 1)", gcfg});
      vlm::SparsePrefillConfig mm;
      mm.method = vlm::SparsePrefillMethod::MMInference;  // default head: grid, + known stride
      patterns.push_back({"mminference(grid heads, known " + std::to_string(g_frame) + " tok/frame)", mm});
    }
  }
  const int32_t known[] = {g_frame};
  // VLM_BENCH_PATTERNS=a,b: only the patterns whose names start with one of these (and dense;
  // "all-blocks" names the all-blocks plan run).
  const auto wanted = [](const std::string& name) { return vlm::bench::pattern_wanted(name); };

  std::erase_if(patterns, [&](const Pattern& p) { return !wanted(p.name); });
  const float scale = 1.0f / std::sqrt(static_cast<float>(kD));
  std::printf("| S | method | plan | kernel | total | speedup vs dense | block density | output rel. error |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (int S : lengths) {
    Setup su(S);
    std::vector<float> dense(su.q.size()), out(su.q.size());
    double t0 = now();
    vlm::paged_attention(su.q.data(), kH, su.kv, su.batch, scale, dense.data());
    const double t_dense = now() - t0;
    std::printf("| %d | dense (paged_attention) | - | %.3f s | %.3f s | 1.00x | 1.000 | 0 |\n", S, t_dense, t_dense);
    std::fflush(stdout);
    if (wanted("all-blocks")) {  // the mechanism's overhead: an all-blocks plan through the block-sparse kernel
      const vlm::BlockSparsePlan p = vlm::dense_plan(S, S, kH);
      const vlm::BlockSparsePlan* pp = &p;
      t0 = now();
      vlm::block_sparse_attention(su.q.data(), kH, su.kv, su.batch, {&pp, 1}, scale, out.data());
      const double t = now() - t0;
      std::printf("| %d | all-blocks plan (block_sparse_attention) | - | %.3f s | %.3f s | %.2fx | 1.000 | %.1e |\n", S, t,
                  t, t_dense / t, rel_l2(out, dense));
    }
    for (const auto& pat : patterns) {
      vlm::ChunkView cv{su.q.data(), S, S, S, su.table.data(), 0, nullptr, {}};
      if (pat.cfg.method == vlm::SparsePrefillMethod::MMInference) cv.frame_strides = known;
      t0 = now();
      const vlm::BlockSparsePlan plan = vlm::build_sparse_plan(pat.cfg, cv, kH, su.kv, scale);
      const double t_plan = now() - t0;
      const vlm::BlockSparsePlan* pp = &plan;
      t0 = now();
      vlm::block_sparse_attention(su.q.data(), kH, su.kv, su.batch, {&pp, 1}, scale, out.data());
      const double t_kernel = now() - t0;
      std::printf("| %d | %s | %.3f s | %.3f s | %.3f s | %.2fx | %.3f | %.4f |\n", S, pat.name.c_str(), t_plan,
                  t_kernel, t_plan + t_kernel, t_dense / (t_plan + t_kernel), vlm::plan_block_density(plan),
                  rel_l2(out, dense));
      std::fflush(stdout);
    }
  }
  return 0;
}

// Sparse prefill attention on the GPU, one layer of Qwen2-7B attention (H = 28, Hkv = 4, D = 128,
// bf16 cache in blocks of 16, shuffled), one sequence of S tokens, all queries, video-structured
// input (bench_sparse_prefill --video's generator: a 200-token text prefix, then frames of 256
// tokens, a key direction per spatial index, 4 sink keys, one salient index; the noise comes from
// a counter hash instead of mt19937 so 512K tokens generate in parallel).
// Per pattern: the plan (CPU planner, kernels/sparse_prefill, on VLM_BENCH_THREADS threads,
// estimation included), its upload, the kernel (paged_block_sparse_attention), kept-block density
// and the relative L2 error of the output against our dense tensor-core kernel
// (paged_prefill_attention), whose time is printed first. torch SDPA runs beside it in the same
// call (bench/cuda/run_sparse_prefill_bench.sh).
// Pattern "mminference-gpu": MMInference's grid heads searched on the GPU (CudaGridSearch) and
// planned on the GPU (CudaGridPlan), then the kernel, timed together wall-clock (estimation
// included; median of 3), plus (VLM_BENCH_KERNELS=1) the kernels side by side on its plans
// (mma.sync and the sm_90a forms: best of 3 each, the outputs' relative L2 against mma.sync's).
// Pattern "mminference-gpu-once": the grid layouts searched on the first 8192 tokens only (the
// engine's grid_search_once with 8K chunks), the whole prompt planned from them; kernel and error.
// Pattern "xattention-gpu": XAttention (stride 8, no dense tail; thresholds VLM_BENCH_XATTN, default
// "0.9,0.8") with its estimation on the GPU (CudaXAttentionPlan: antidiagonal scores, selection,
// device plans), then the kernel, timed together wall-clock (estimation included; median of
// VLM_BENCH_XATTN_RUNS, default 3, after a warm-up).
// VLM_BENCH_HLINE=0: the mminference-gpu patterns' grid heads without horizontal lines.
// Pattern "vertical-slash-gpu": vertical-slash (1000, 6096) estimated on the GPU (CudaVerticalSlash),
// then either the plans built on the device (CudaVerticalSlashPlan) or one download of every
// head's lists + the host's vertical_slash_head_plan (thread pool) + the upload; each chain
// timed wall-clock with the kernel (median of 3), and (S <= 128K) the GPU's lists' overlap with
// the CPU's estimate_vertical_slash on the same bf16 inputs.
// Usage: bench_cuda_sparse_prefill [S ...]   (default 131072 262144 524288);
// VLM_BENCH_PATTERNS=a,b as in bench_sparse_prefill ("all-blocks": the all-blocks plan, S <= 128K).
#include <cuda_runtime.h>

#include "bench/common/pattern_filter.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/common/shuffled_cache.h"
#include "kernels/core/thread_pool.h"
#include "kernels/cuda/sparse_prefill/block_sparse_sm90.h"
#include "kernels/cuda/sparse_prefill/cuda_block_sparse.h"
#include "kernels/cuda/sparse_prefill/cuda_grid_plan.h"
#include "kernels/cuda/sparse_estimate/cuda_grid_search.h"
#include "kernels/cuda/sparse_prefill/cuda_vertical_slash_plan.h"
#include "kernels/cuda/sparse_prefill/cuda_xattention_plan.h"
#include "kernels/sparse_prefill/sparse_prefill_planner.h"

namespace {

using vlm::cuda::DeviceBuffer;
constexpr int kH = 28, kHkv = 4, kD = 128, kB = 16, kPrefix = 200, kFrame = 256, kSalient = 77;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Uniform in [-1, 1) from a counter (splitmix64).
float noise(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<float>(x >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

std::vector<float> g_dirs;  // [kFrame, 32] unit directions

// The CPU bench's amplitudes were set for D = 64 (logit scale 1/8); at D = 128 each is multiplied
// by (128/64)^(1/4), so q.k/sqrt(D) of the structure is the D = 64 one (VLM_BENCH_AMP overrides
// the factor; 1 gives the first GPU bench's input).
float g_amp = 1.0f;

float structure(int pos, int d, bool key) {
  if (pos < kPrefix) return d < 8 && (!key || pos < 4) ? 2.5f * g_amp : 0.0f;
  const int x = (pos - kPrefix) % kFrame;
  if (d < 8) return key ? (x == kSalient ? 2.0f * g_amp : 0.0f) : 2.5f * g_amp;
  if (d < 40) return 10.0f * g_amp * g_dirs[x * 32 + d - 8];
  return 0.0f;
}

struct Setup {
  int S;
  std::mt19937 rng{42};
  vlm::bench::ShuffledCache cache;
  std::unique_ptr<float[]> qf;  // [S, H, D] f32, only the rows the planners read are filled
  std::vector<uint16_t> qb;     // [S, H, D] bf16
  DeviceBuffer dk, dv, dq, dtable, dcu, dctx, dense, out;
  vlm::PagedKVLayer dev_kv;
  vlm::cuda::CudaAttentionBatch batch;
  int32_t cu[2] = {0, 0};

  explicit Setup(int s) : S(s), cache(s, kB, kHkv, kD, vlm::DType::BF16, rng), qf(new float[size_t(s) * kH * kD]) {
    cu[1] = S;
    const size_t qn = size_t(S) * kH * kD;
    qb.resize(qn);
    auto bf16 = [](float x) {
      uint16_t h;
      vlm::convert_from_f32(&x, vlm::DType::BF16, &h, 1);
      return h;
    };
    auto* kc = reinterpret_cast<uint16_t*>(cache.kbuf.data());
    auto* vc = reinterpret_cast<uint16_t*>(cache.vbuf.data());
    const int tasks = 256;
    vlm::global_thread_pool().run_tasks(tasks, [&](int64_t t) {
      for (int j = int(t * S / tasks); j < int((t + 1) * S / tasks); ++j) {
        for (int h = 0; h < kHkv; ++h)
          for (int d = 0; d < kD; ++d) {
            const uint64_t id = (uint64_t(j) * kHkv + h) * kD + d;
            const int64_t e = int64_t(cache.slots[j]) / kB * cache.kv.block_stride() + h * cache.kv.head_stride() +
                              int64_t(cache.slots[j] % kB) * kD + d;
            kc[e] = bf16(0.5f * noise(2 * id) + structure(j, d, true));
            vc[e] = bf16(noise(2 * id + 1));
          }
        for (int h = 0; h < kH; ++h)
          for (int d = 0; d < kD; ++d) {
            const size_t i = (size_t(j) * kH + h) * kD + d;
            qb[i] = bf16(0.5f * noise(uint64_t(1) << 62 | i) + structure(j, d, false));
          }
      }
    });
    // f32 queries of the last rows (the estimating planners' input).
    const int last = std::min(S, 1024);
    vlm::convert_to_f32(qb.data() + size_t(S - last) * kH * kD, vlm::DType::BF16, qf.get() + size_t(S - last) * kH * kD,
                        int64_t(last) * kH * kD);
    auto up = [](DeviceBuffer& b, const void* p, size_t n) {
      b.resize(n);
      VLM_CUDA_CHECK(cudaMemcpy(b.get(), p, n, cudaMemcpyHostToDevice));
    };
    up(dk, cache.kbuf.data(), cache.kbuf.size());
    up(dv, cache.vbuf.data(), cache.vbuf.size());
    up(dq, qb.data(), qn * 2);
    up(dtable, cache.table.data(), cache.table.size() * 4);
    up(dcu, cu, 8);
    up(dctx, &S, 4);
    dense.resize(qn * 2);
    out.resize(qn * 2);
    dev_kv = cache.kv;
    dev_kv.k = dk.get();
    dev_kv.v = dv.get();
    batch.num_seqs = 1;
    batch.cu_seqlens_q = dcu.as<int32_t>();
    batch.context_lens = dctx.as<int32_t>();
    batch.block_tables = dtable.as<int32_t>();
    batch.max_blocks_per_seq = static_cast<int>(cache.table.size());
    batch.max_q_len = S;
    batch.max_context_len = S;
  }
};

// Seconds of fn on the GPU (CUDA events).
template <class F>
double gpu_seconds(F&& fn) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  fn();
  cudaEventRecord(b);
  VLM_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms * 1e-3;
}

// ||got - ref|| / ||ref|| of two bf16 device tensors of n values.
// MMInference's default grid head; VLM_BENCH_HLINE=0: without horizontal lines.
vlm::GridParams bench_grid_params() {
  vlm::GridParams g = vlm::SparsePrefillConfig{}.default_head.grid;
  const char* e = std::getenv("VLM_BENCH_HLINE");
  g.use_hline = !(e && std::string(e) == "0");
  return g;
}

double rel_l2(const DeviceBuffer& got, const DeviceBuffer& ref, size_t n) {
  std::vector<uint16_t> a(n), b(n);
  VLM_CUDA_CHECK(cudaMemcpy(a.data(), got.get(), n * 2, cudaMemcpyDeviceToHost));
  VLM_CUDA_CHECK(cudaMemcpy(b.data(), ref.get(), n * 2, cudaMemcpyDeviceToHost));
  const int tasks = 64;
  std::vector<double> num(tasks), den(tasks);
  vlm::global_thread_pool().run_tasks(tasks, [&](int64_t t) {
    float x[1024], y[1024];
    for (size_t i = t * n / tasks; i < (t + 1) * n / tasks; i += 1024) {
      const int c = int(std::min<size_t>(1024, (t + 1) * n / tasks - i));
      vlm::convert_to_f32(a.data() + i, vlm::DType::BF16, x, c);
      vlm::convert_to_f32(b.data() + i, vlm::DType::BF16, y, c);
      for (int k = 0; k < c; ++k) {
        num[t] += double(x[k] - y[k]) * (x[k] - y[k]);
        den[t] += double(y[k]) * y[k];
      }
    }
  });
  double sn = 0, sd = 0;
  for (int t = 0; t < tasks; ++t) sn += num[t], sd += den[t];
  return std::sqrt(sn / sd);
}

// XAttention with the estimation on the GPU: scores + selection, the device plan, the kernel,
// timed wall-clock to completion (median of 3 after a warm-up); one table row per threshold.
void bench_xattention(Setup& su, int S, double t_dense, float scale) {
  vlm::cuda::CudaXAttentionPlan xp;
  std::vector<int> heads(kH);
  for (int h = 0; h < kH; ++h) heads[h] = h;
  const size_t qn = size_t(S) * kH * kD;
  const char* list = std::getenv("VLM_BENCH_XATTN");
  const char* nr = std::getenv("VLM_BENCH_XATTN_RUNS");
  std::vector<float> thresholds;
  {
    std::stringstream ss(list ? list : "0.9,0.8");
    for (std::string w; std::getline(ss, w, ',');) thresholds.push_back(std::stof(w));
  }
  const int num_runs = std::max(1, nr ? std::atoi(nr) : 3);
  for (const float th : thresholds) {
    vlm::XAttentionParams p;
    p.threshold = th;
    p.n_last = 0;
    auto chain = [&](double* t_est, double* t_plan) {
      VLM_CUDA_CHECK(cudaDeviceSynchronize());
      const double a = now();
      xp.begin(kH, 0, S, S, nullptr);
      xp.estimate(su.dq.get(), vlm::DType::BF16, su.dev_kv, su.dtable.as<int32_t>(), heads, p, S, scale, nullptr);
      VLM_CUDA_CHECK(cudaDeviceSynchronize());
      const double b = now();
      xp.build(nullptr);
      VLM_CUDA_CHECK(cudaDeviceSynchronize());
      const double c = now();
      vlm::cuda::paged_block_sparse_attention(su.dq.get(), vlm::DType::BF16, kH, su.dev_kv, su.batch, xp.view(), scale,
                                              su.out.get(), nullptr);
      VLM_CUDA_CHECK(cudaDeviceSynchronize());
      if (t_est) *t_est = b - a, *t_plan = c - b;
      return now() - a;
    };
    chain(nullptr, nullptr);  // warm-up
    std::vector<std::array<double, 3>> runs(num_runs);
    for (auto& r : runs) r[0] = chain(&r[1], &r[2]);
    std::sort(runs.begin(), runs.end());
    const double t_all = runs[num_runs / 2][0], t_est = runs[num_runs / 2][1], t_plan = runs[num_runs / 2][2];
    const vlm::BlockCounts bc = xp.block_counts();
    std::printf("| %d | xattention(stride 8, threshold %.1f) (GPU estimation + GPU plans), estimation included | "
                "%.1f ms estimation + %.1f ms plans | - | %.1f ms total (kernel %.1f ms) | %.2fx | %.4f | %.4f |\n",
                S, th, t_est * 1e3, t_plan * 1e3, t_all * 1e3, (t_all - t_est - t_plan) * 1e3, t_dense / t_all,
                bc.computed / bc.causal, rel_l2(su.out, su.dense, qn));
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* amp = std::getenv("VLM_BENCH_AMP");
  g_amp = amp ? static_cast<float>(std::atof(amp)) : static_cast<float>(std::pow(kD / 64.0, 0.25));
  std::fprintf(stderr, "structure amplitude factor %.4f\n", g_amp);
  const char* th = std::getenv("VLM_BENCH_THREADS");
  vlm::set_num_threads(th ? std::atoi(th) : 16);
  std::vector<int> lengths;
  for (int i = 1; i < argc; ++i) lengths.push_back(std::atoi(argv[i]));
  if (lengths.empty()) lengths = {131072, 262144, 524288};
  {
    std::mt19937 rng(5);
    std::normal_distribution<float> g(0, 1);
    g_dirs.resize(size_t(kFrame) * 32);
    for (int x = 0; x < kFrame; ++x) {
      double n = 0;
      for (int d = 0; d < 32; ++d) n += std::pow(g_dirs[x * 32 + d] = g(rng), 2);
      for (int d = 0; d < 32; ++d) g_dirs[x * 32 + d] /= static_cast<float>(std::sqrt(n));
    }
  }
  struct Pattern {
    std::string name;
    vlm::SparsePrefillConfig cfg;
  };
  std::vector<Pattern> patterns;
  {
    vlm::SparsePrefillConfig c;
    c.method = vlm::SparsePrefillMethod::TriShape;
    patterns.push_back({"tri_shape(128, 3968, last 100)", c});
    c.method = vlm::SparsePrefillMethod::VerticalSlash;
    patterns.push_back({"vertical_slash(1000, 6096)", c});
    vlm::SparsePrefillConfig mm;
    mm.method = vlm::SparsePrefillMethod::MMInference;  // default head: grid, + known stride
    patterns.push_back({"mminference(grid heads, known 256 tok/frame)", mm});
  }
  std::erase_if(patterns, [](const Pattern& p) { return !vlm::bench::pattern_wanted(p.name); });
  const int32_t known[] = {kFrame};
  const float scale = 1.0f / std::sqrt(float(kD));
  cudaFree(nullptr);
  vlm::cuda::CudaGridSearch gs;
  vlm::cuda::CudaGridPlan gplan;
  std::printf("| S | method | plan (CPU) | upload | kernel | kernel speedup vs our dense | block density | output rel. L2 |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (int S : lengths) {
    double t0 = now();
    Setup su(S);
    std::fprintf(stderr, "S=%d: input generated and uploaded in %.1f s\n", S, now() - t0);
    const size_t qn = size_t(S) * kH * kD;
    auto dense_call = [&] {
      vlm::cuda::paged_prefill_attention(su.dq.get(), vlm::DType::BF16, kH, su.dev_kv, su.batch, scale, su.dense.get(),
                                         nullptr);
    };
    dense_call();  // warm-up
    const double t_dense = gpu_seconds(dense_call);
    std::printf("| %d | dense (paged_prefill_attention) | - | - | %.1f ms | 1.00x | 1.000 | 0 |\n", S, t_dense * 1e3);
    std::fflush(stdout);
    vlm::cuda::CudaBlockSparsePlan dplan;
    auto run = [&](const std::string& name, const vlm::BlockSparsePlan& plan, double t_plan) {
      const vlm::BlockSparsePlan* pp = &plan;
      double t = now();
      dplan.upload({&pp, 1}, su.cu, kH, nullptr);
      VLM_CUDA_CHECK(cudaDeviceSynchronize());
      const double t_up = now() - t;
      auto call = [&] {
        vlm::cuda::paged_block_sparse_attention(su.dq.get(), vlm::DType::BF16, kH, su.dev_kv, su.batch, dplan, scale,
                                                su.out.get(), nullptr);
      };
      call();  // warm-up
      const double t_k = gpu_seconds(call);
      std::printf("| %d | %s | %.3f s | %.1f ms | %.1f ms | %.2fx | %.4f | %.4f |\n", S, name.c_str(), t_plan,
                  t_up * 1e3, t_k * 1e3, t_dense / t_k, dplan.block_density(), rel_l2(su.out, su.dense, qn));
      std::fflush(stdout);
    };
    if (vlm::bench::pattern_wanted("all-blocks") && S <= 131072) run("all-blocks plan", vlm::dense_plan(S, S, kH), 0.0);
    for (const auto& pat : patterns) {
      vlm::ChunkView cv{su.qf.get(), S, S, S, su.cache.table.data(), 0, nullptr, {}};
      if (pat.cfg.method == vlm::SparsePrefillMethod::MMInference) cv.frame_strides = known;
      t0 = now();
      const vlm::BlockSparsePlan plan = vlm::build_sparse_plan(pat.cfg, cv, kH, su.cache.kv, scale);
      run(pat.name, plan, now() - t0);
    }
    if (vlm::bench::pattern_wanted("mminference-gpu")) {
      // MMInference's grid heads with the estimation on the GPU: the device search (one download
      // of the line sums, the stride/phase decision on the host), then the plans built on the
      // device (CudaGridPlan), then the kernel; the whole chain timed wall-clock to completion.
      const vlm::GridParams gp = bench_grid_params();
      vlm::cuda::GridEstimateShape sh;
      sh.num_heads = kH;
      sh.q_len = sh.num_keys = S;
      sh.rows = std::min(gp.last_q, 64);
      auto chain = [&](double* t_est, double* t_plan) {
        VLM_CUDA_CHECK(cudaDeviceSynchronize());
        const double a = now();
        const auto layouts = gs.search(su.dq.get(), vlm::DType::BF16, su.dev_kv, su.dtable.as<int32_t>(), sh, scale,
                                       gp, known, nullptr);
        const double b = now();
        gplan.build(layouts, gp, 0, S, S, nullptr);
        VLM_CUDA_CHECK(cudaDeviceSynchronize());
        const double c = now();
        vlm::cuda::paged_block_sparse_attention(su.dq.get(), vlm::DType::BF16, kH, su.dev_kv, su.batch, gplan.view(),
                                                scale, su.out.get(), nullptr);
        VLM_CUDA_CHECK(cudaDeviceSynchronize());
        if (t_est) {
          *t_est = b - a, *t_plan = c - b;
          std::fprintf(stderr, "S=%d: stride of head 0: %d, phase %d\n", S, layouts[0].stride, layouts[0].phase);
        }
        return now() - a;
      };
      chain(nullptr, nullptr);  // warm-up
      // Median (by total) of 3 chains.
      std::vector<std::array<double, 3>> runs(3);
      for (auto& r : runs) r[0] = chain(&r[1], &r[2]);
      std::sort(runs.begin(), runs.end());
      const double t_all = runs[1][0], t_est = runs[1][1], t_plan = runs[1][2];
      {  // the search's device part alone: scores, softmax, line sums
        DeviceBuffer probs(size_t(kH) * sh.rows * S * 4), col(size_t(kH) * S * 8), sl(size_t(kH) * S * 8);
        const double t_dev = gpu_seconds([&] {
          vlm::cuda::grid_last_q_probs(su.dq.get(), vlm::DType::BF16, su.dev_kv, su.dtable.as<int32_t>(), sh, scale,
                                       probs.as<float>(), nullptr);
          vlm::cuda::grid_line_sums(probs.as<float>(), sh, col.as<double>(), sl.as<double>(), nullptr);
        });
        std::fprintf(stderr, "S=%d: search %.1f ms of which scores + softmax + line sums on the device %.1f ms\n", S,
                     t_est * 1e3, t_dev * 1e3);
      }
      std::printf("| %d | mminference%s (GPU search + GPU plans), estimation included | %.1f ms search + %.1f ms plans | "
                  "- | %.1f ms total (kernel %.1f ms) | %.2fx | %.4f | %.4f |\n",
                  S, gp.use_hline ? "" : " without hlines", t_est * 1e3, t_plan * 1e3, t_all * 1e3, (t_all - t_est - t_plan) * 1e3, t_dense / t_all,
                  gplan.block_density(), rel_l2(su.out, su.dense, qn));
      std::fflush(stdout);
      // VLM_BENCH_KERNELS=1: the kernels side by side on the same plans (the mma.sync kernel and
      // the sm_90a kernel; best of 3 each), and the sm_90a output against the mma.sync output.
      const char* ab = std::getenv("VLM_BENCH_KERNELS");
      if (ab && std::string(ab) == "1") {
        auto call = [&](void* out) {
          vlm::cuda::paged_block_sparse_attention(su.dq.get(), vlm::DType::BF16, kH, su.dev_kv, su.batch, gplan.view(),
                                                  scale, out, nullptr);
        };
        DeviceBuffer mma_out(qn * 2);
        const std::array<std::pair<vlm::cuda::BlockSparseKernel, const char*>, 2> kernels = {{
            {vlm::cuda::BlockSparseKernel::kMma, "mma.sync"},
            {vlm::cuda::BlockSparseKernel::kWgmma, "wgmma (sm_90a)"},
        }};
        for (const auto& [k, name] : kernels) {
          vlm::cuda::set_block_sparse_kernel(k);
          if (vlm::cuda::block_sparse_kernel_for(su.dev_kv) != k) continue;
          void* out = k == vlm::cuda::BlockSparseKernel::kMma ? mma_out.get() : su.out.get();
          call(out);
          double best = 1e30;
          for (int r = 0; r < 3; ++r) best = std::min(best, gpu_seconds([&] { call(out); }));
          std::fprintf(stderr, "S=%d: mminference kernel %s %.2f ms", S, name, best * 1e3);
          if (k != vlm::cuda::BlockSparseKernel::kMma)
            std::fprintf(stderr, ", output vs mma.sync rel L2 %.2e", rel_l2(su.out, mma_out, qn));
          std::fprintf(stderr, "\n");
        }
        vlm::cuda::set_block_sparse_kernel(vlm::cuda::BlockSparseKernel::kAuto);
      }
    }
    if (vlm::bench::pattern_wanted("vertical-slash-gpu")) {
      vlm::cuda::GridEstimateShape sh;
      sh.num_heads = kH;
      sh.q_len = sh.num_keys = S;
      sh.rows = 64;
      const std::vector<vlm::VerticalSlashParams> params(kH);  // (1000, 6096), last 64 rows
      vlm::cuda::CudaVerticalSlash est;
      vlm::cuda::CudaVerticalSlashPlan vp;
      vlm::cuda::CudaBlockSparsePlan hplan;
      // t[0] total, t[1] estimate, t[2] plan (device: build; host: download + plans + upload).
      auto chain = [&](bool on_device, std::array<double, 3>& t) {
        VLM_CUDA_CHECK(cudaDeviceSynchronize());
        const double a = now();
        est.estimate(su.dq.get(), vlm::DType::BF16, su.dev_kv, su.dtable.as<int32_t>(), sh, scale, params, nullptr);
        VLM_CUDA_CHECK(cudaDeviceSynchronize());
        const double b = now();
        vlm::cuda::SparsePlanView view;
        if (on_device) {
          vp.build(est, 0, S, S, nullptr);
          view = vp.view();
        } else {
          est.download(nullptr);
          VLM_CUDA_CHECK(cudaStreamSynchronize(nullptr));
          vlm::BlockSparsePlan p;
          p.q_len = p.num_keys = S;
          p.block_m = p.block_n = 64;
          p.heads.resize(kH);
          vlm::global_thread_pool().run_tasks(kH, [&](int64_t h) {
            p.heads[h] = vlm::vertical_slash_head_plan(est.indices(static_cast<int>(h)), S, S, 64);
          });
          const vlm::BlockSparsePlan* pp = &p;
          hplan.upload({&pp, 1}, su.cu, kH, nullptr);
          view = hplan.view();
        }
        VLM_CUDA_CHECK(cudaDeviceSynchronize());
        const double c = now();
        vlm::cuda::paged_block_sparse_attention(su.dq.get(), vlm::DType::BF16, kH, su.dev_kv, su.batch, view, scale,
                                                su.out.get(), nullptr);
        VLM_CUDA_CHECK(cudaDeviceSynchronize());
        t = {now() - a, b - a, c - b};
      };
      for (const bool on_device : {true, false}) {
        std::vector<std::array<double, 3>> runs(4);
        for (auto& r : runs) chain(on_device, r);  // the first a warm-up
        std::sort(runs.begin() + 1, runs.end());
        const auto& t = runs[2];
        std::printf("| %d | vertical_slash(1000, 6096), GPU estimate + %s, estimation included | %.1f ms estimate + "
                    "%.1f ms plans | - | %.1f ms total (kernel %.1f ms) | %.2fx | %.4f | %.4f |\n",
                    S, on_device ? "GPU plans" : "host plans (one download, 16 threads, upload)", t[1] * 1e3,
                    t[2] * 1e3, t[0] * 1e3, (t[0] - t[1] - t[2]) * 1e3, t_dense / t[0],
                    on_device ? vp.block_density() : hplan.block_density(), rel_l2(su.out, su.dense, qn));
        std::fflush(stdout);
      }
      if (S <= 131072) {  // the GPU's lists against the CPU's estimate (f32 queries of the bf16 rows)
        est.download(nullptr);
        VLM_CUDA_CHECK(cudaStreamSynchronize(nullptr));
        std::vector<double> worst(kH, 1.0);
        std::vector<std::vector<float>> keys(kHkv, std::vector<float>(size_t(S) * kD));
        vlm::global_thread_pool().run_tasks(kHkv, [&](int64_t g) {
          vlm::gather_head_keys(su.cache.kv, su.cache.table.data(), static_cast<int>(g), S, keys[g].data());
        });
        vlm::global_thread_pool().run_tasks(kH, [&](int64_t h) {
          std::vector<float> rows(64 * kD);
          for (int r = 0; r < 64; ++r)
            std::copy_n(su.qf.get() + (size_t(S - 64 + r) * kH + h) * kD, kD, rows.data() + r * kD);
          const auto cpu = vlm::estimate_vertical_slash(rows.data(), 64, keys[h / (kH / kHkv)].data(), S, kD, scale,
                                                        params[h]);
          const auto gpu = est.indices(static_cast<int>(h));
          for (const auto& [x, y] : {std::pair(&cpu.vertical, &gpu.vertical), std::pair(&cpu.slash, &gpu.slash)}) {
            std::vector<int32_t> a = *x, b = *y, both;
            std::sort(a.begin(), a.end());
            std::sort(b.begin(), b.end());
            std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
            worst[h] = std::min(worst[h], double(both.size()) / double(std::max<size_t>(a.size(), 1)));
          }
        });
        std::fprintf(stderr, "S=%d: vertical-slash lists, GPU vs CPU estimate: worst overlap over heads %.4f\n", S,
                     *std::min_element(worst.begin(), worst.end()));
      }
    }
    if (vlm::bench::pattern_wanted("mminference-gpu-once") && S > 8192) {
      // grid_search_once's choice for chunked prefill: the layouts searched on the first 8192-token
      // chunk alone (its last 64 queries over its own keys), the plan of all S rows made from them
      // (what the later chunks' plans extend to), then the kernel: the error of estimating once
      // from the prompt's first chunk instead of from its last queries.
      const vlm::GridParams gp = bench_grid_params();
      vlm::cuda::GridEstimateShape sh;
      sh.num_heads = kH;
      sh.q_len = sh.num_keys = 8192;
      sh.rows = std::min(gp.last_q, 64);
      const auto layouts = gs.search(su.dq.get(), vlm::DType::BF16, su.dev_kv, su.dtable.as<int32_t>(), sh, scale, gp,
                                     known, nullptr);
      gplan.build(layouts, gp, 0, S, S, nullptr);
      auto call = [&] {
        vlm::cuda::paged_block_sparse_attention(su.dq.get(), vlm::DType::BF16, kH, su.dev_kv, su.batch, gplan.view(),
                                                scale, su.out.get(), nullptr);
      };
      call();
      const double t_k = gpu_seconds(call);
      std::fprintf(stderr, "S=%d: first-chunk search: stride of head 0: %d, phase %d\n", S, layouts[0].stride,
                   layouts[0].phase);
      std::printf("| %d | mminference%s, searched once on the first 8192 tokens | - | - | kernel %.1f ms | %.2fx (kernel) | "
                  "%.4f | %.4f |\n",
                  S, gp.use_hline ? "" : " without hlines", t_k * 1e3, t_dense / t_k, gplan.block_density(), rel_l2(su.out, su.dense, qn));
      std::fflush(stdout);
    }
    if (vlm::bench::pattern_wanted("xattention-gpu")) bench_xattention(su, S, t_dense, scale);
  }
  return 0;
}

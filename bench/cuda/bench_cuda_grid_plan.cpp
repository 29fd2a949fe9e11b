// The per-layer cost of the grid heads' device plan build (CudaGridPlan::build) and of the
// device stride/layout choice (grid_choose_strides + grid_phase_mass + grid_layouts_from_phase,
// what CudaGridSearch::choose_on_device enqueues), on the GPU timeline as the chunked prefill
// sees them: Qwen2-7B's 28 query heads, a chunk of q_len rows (default 8192) over N keys, the
// layouts the search finds on the video input (stride 256, 2 vertical groups, 1 horizontal, the
// default GridParams). Each of `reps` iterations first enqueues ~0.2 ms of other GPU work (a
// memset), so the host is ahead of the GPU as in the decoder, then the build between two events;
// the table gives the mean of those spans (GPU time incl. the gaps between its launches) and the
// host's enqueue time. The choice runs on random line sums with a planted stride at N = q_len.
// Usage: bench_cuda_grid_plan [N ...] (default 8192 65536 131072); VLM_BENCH_QLEN, VLM_BENCH_REPS.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/device_buffer.h"
#include "kernels/cuda/sparse_estimate/grid_estimate.cuh"
#include "kernels/cuda/sparse_prefill/cuda_grid_plan.h"
#include "kernels/sparse_prefill/grid.h"

namespace {

using vlm::cuda::DeviceBuffer;
constexpr int kH = 28;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int env_int(const char* name, int def) {
  const char* e = std::getenv(name);
  return e ? std::atoi(e) : def;
}

// Mean GPU span (ms) and host enqueue time (ms) of op() over reps, each after a busy memset.
template <class F>
void time_spans(const char* what, int reps, cudaStream_t st, DeviceBuffer& busy, F&& op) {
  std::vector<cudaEvent_t> ev(2 * reps);
  for (auto& e : ev) VLM_CUDA_CHECK(cudaEventCreate(&e));
  VLM_CUDA_CHECK(cudaStreamSynchronize(st));
  double host = 0;
  for (int r = 0; r < reps; ++r) {
    VLM_CUDA_CHECK(cudaMemsetAsync(busy.get(), r & 0xff, busy.bytes(), st));
    VLM_CUDA_CHECK(cudaEventRecord(ev[2 * r], st));
    const double t = now();
    op();
    host += now() - t;
    VLM_CUDA_CHECK(cudaEventRecord(ev[2 * r + 1], st));
  }
  VLM_CUDA_CHECK(cudaStreamSynchronize(st));
  double gpu = 0;
  for (int r = 0; r < reps; ++r) {
    float ms = 0;
    VLM_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * r], ev[2 * r + 1]));
    gpu += ms;
  }
  for (auto& e : ev) VLM_CUDA_CHECK(cudaEventDestroy(e));
  std::printf("| %s | %.1f us | %.1f us |\n", what, 1e3 * gpu / reps, 1e6 * host / reps);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> lengths;
  for (int i = 1; i < argc; ++i) lengths.push_back(std::atoi(argv[i]));
  if (lengths.empty()) lengths = {8192, 65536, 131072};
  const int q_len = env_int("VLM_BENCH_QLEN", 8192), reps = env_int("VLM_BENCH_REPS", 28);
  cudaStream_t st;
  VLM_CUDA_CHECK(cudaStreamCreate(&st));
  DeviceBuffer busy(size_t(512) << 20);  // ~0.2 ms of memset
  vlm::GridParams gp;
  std::mt19937 rng(5);
  std::vector<vlm::GridLayout> layouts(kH);
  for (auto& l : layouts) {
    l.stride = 256;
    l.phase = static_cast<int>(rng() % 256);
    l.vgroups = {0, static_cast<int32_t>(1 + rng() % 255)};
    l.hgroups = {0};
  }
  std::printf("| op (28 heads, %d rows) | GPU span per call | host enqueue per call |\n| --- | --- | --- |\n", q_len);
  vlm::cuda::CudaGridPlan plan;
  DeviceBuffer acc(2 * sizeof(unsigned long long));
  for (int N : lengths) {
    if (N < q_len) continue;
    auto build = [&] { plan.build(layouts, gp, N - q_len, q_len, N, st, acc.as<unsigned long long>()); };
    build();  // warm-up (grows the buffers)
    build();
    const std::string what = "plan build, N = " + std::to_string(N);
    time_spans(what.c_str(), reps, st, busy, build);
  }

  // The choice at N = q_len (the first chunk): random line sums, stride 256 planted.
  const int N = q_len, R = 64;
  const int32_t known[] = {256};
  const std::vector<int32_t> cands = vlm::grid_stride_candidates(N, gp, known);
  vlm::cuda::GridChoiceShape cs;
  cs.num_heads = kH;
  cs.num_keys = N;
  cs.n_init = std::min(gp.n_init, N);
  cs.num_cands = static_cast<int>(cands.size());
  cs.max_cand = *std::max_element(cands.begin(), cands.end());
  cs.num_known = 1;
  cs.num_vlines = gp.num_vlines;
  cs.num_hlines = gp.num_hlines;
  const size_t hn = size_t(kH) * N;
  std::vector<double> col(hn), slash(hn);
  std::vector<float> probs(hn * R);
  std::uniform_real_distribution<double> u(0.0, 1e-4);
  for (size_t i = 0; i < hn; ++i) {
    const int j = static_cast<int>(i % N);
    col[i] = u(rng) + (j % 256 == 21 ? 1e-2 : 0.0);
    slash[i] = u(rng);
  }
  for (size_t i = 0; i < probs.size(); ++i) probs[i] = static_cast<float>(u(rng));
  DeviceBuffer d_col(hn * 8), d_slash(hn * 8), d_probs(probs.size() * 4), d_cands((cands.size() + 1) * 4);
  VLM_CUDA_CHECK(cudaMemcpy(d_col.get(), col.data(), hn * 8, cudaMemcpyHostToDevice));
  VLM_CUDA_CHECK(cudaMemcpy(d_slash.get(), slash.data(), hn * 8, cudaMemcpyHostToDevice));
  VLM_CUDA_CHECK(cudaMemcpy(d_probs.get(), probs.data(), probs.size() * 4, cudaMemcpyHostToDevice));
  VLM_CUDA_CHECK(cudaMemcpy(d_cands.get(), cands.data(), cands.size() * 4, cudaMemcpyHostToDevice));
  VLM_CUDA_CHECK(cudaMemcpy(d_cands.as<int32_t>() + cands.size(), known, 4, cudaMemcpyHostToDevice));
  const int C = cs.num_cands;
  const size_t ht = size_t(kH) * vlm::cuda::kGridChoiceTop;
  DeviceBuffer f64((2 * kH + ht + size_t(kH) * C + kH) * 8), i32((ht + kH) * 4);
  vlm::cuda::GridChoiceScratch w;
  w.totals = f64.as<double>();
  w.top_keys = w.totals + 2 * kH;
  w.cand_scores = w.top_keys + ht;
  double* scores = w.cand_scores + size_t(kH) * C;
  w.top_idx = i32.as<int32_t>();
  int32_t* strides = w.top_idx + ht;
  DeviceBuffer phase(size_t(kH) * cs.max_cand * 8), lay(kH * sizeof(vlm::cuda::DeviceGridLayout));
  vlm::cuda::GridEstimateShape sh;
  sh.num_heads = kH;
  sh.q_len = sh.num_keys = N;
  sh.rows = R;
  auto choose = [&] {
    vlm::cuda::grid_choose_strides(d_col.as<double>(), d_slash.as<double>(), d_cands.as<int32_t>(),
                                   d_cands.as<int32_t>() + C, cs, w, strides, scores, st);
  };
  auto layout = [&] {
    vlm::cuda::grid_phase_mass(d_probs.as<float>(), sh, strides, cs.max_cand, gp.band, cs.n_init,
                               phase.as<double>(), st);
    vlm::cuda::grid_layouts_from_phase(phase.as<double>(), cs.max_cand, strides, scores, cs,
                                       lay.as<vlm::cuda::DeviceGridLayout>(), st);
  };
  choose();
  layout();
  time_spans("choice: strides (grid_choose_strides)", reps, st, busy, choose);
  time_spans("choice: phase mass + layouts", reps, st, busy, layout);
  std::vector<vlm::cuda::DeviceGridLayout> hl(kH);
  VLM_CUDA_CHECK(cudaMemcpy(hl.data(), lay.get(), hl.size() * sizeof hl[0], cudaMemcpyDeviceToHost));
  std::printf("head 0: stride %d phase %d score %.4f\n", hl[0].stride, hl[0].phase, hl[0].score);
  return 0;
}

// Issue 44's in-model cuDNN rows (contract in cudnn_inmodel_bench.h).
// cuDNN's attention ran ~497 / ~547 TFLOP/s inside the model (eager profile, 8K / 32K)
// against ~605 / ~613 in bench_cudnn_prefill (cuDNN 9.14). Rows, each with the SM clock, power
// and clock-limit reasons sampled through NVML while it ran (nvml_sampler.h):
//  - standalone config=c: contiguous n-row q/k/v, the exact plan, each candidate (as "cudnn");
//    then the candidate autotune picks (CudnnAttentionOptions::autotune);
//  - inmodel: the decoder's first-chunk call as CudaCudnnPrefill::first_chunks makes it: q, k, v,
//    out of n + 1024 (bucket) slack rows, the two memsets of k/v's slack rows, the exact plan
//    (seq_q = seq_kv = n, top-left causal), default options (candidate 0 unless the
//    VLM_CUDNN_ATTENTION_* variables say otherwise); 28 layers back to back, median per layer;
//  - inmodel+gemm: the same with one Qwen2-7B layer's GEMMs (q/k/v, o, gate/up, down through
//    cuBLASLt, as the decoder runs them) before each attention, the attention timed alone by
//    events around it: the chip's state inside a prefill (clock under the power cap);
//  - qk x4: standalone with q and k 4x larger (peakier softmax; data-dependent power).
#include "bench/cuda/cudnn_inmodel_bench.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/cuda/attention_bench_util.h"
#include "kernels/cuda/attention/cudnn_attention.h"
#include "kernels/cuda/gemm/cublaslt_gemm.h"

namespace vlm::bench {
namespace {

constexpr int kH = 28, kHkv = 4, kD = 128;

struct Layers {
  double attn_ms = 0, gemm_ms = 0;  // median attention per layer, mean GEMMs per layer
  NvmlSampler::Stats st;
};

void print_row(const char* row, int n, const Layers& r, double flops) {
  std::printf("inmodel tokens=%d row=%s attn_ms=%.3f tflops=%.1f", n, row, r.attn_ms, flops / r.attn_ms * 1e-9);
  if (r.gemm_ms > 0) {
    const double gemm_flops = 2.0 * n * 3584.0 * (4608 + 3584 + 37888 + 18944);
    std::printf(" gemm_ms=%.3f gemm_tflops=%.1f", r.gemm_ms, gemm_flops / r.gemm_ms * 1e-9);
  }
  if (r.st.samples > 0)
    std::printf(" sm_mhz=%.0f (%u..%u) power_w=%.0f reasons=0x%llx samples=%d", r.st.mean_sm_mhz, r.st.min_sm_mhz,
                r.st.max_sm_mhz, r.st.mean_power_w, r.st.reasons, r.st.samples);
  std::printf("\n");
}

}  // namespace

void bench_cudnn_inmodel(int n, NvmlSampler& nvml) {
  constexpr int kSlack = 1024, kLayers = 28, kHidden = 3584, kInter = 18944, kQkv = kHidden + 2 * kHkv * kD;
  const size_t row_kv = size_t(kHkv) * kD * 2;  // bytes of a k / v row
  void* q = random_bf16(size_t(n + kSlack) * kH * kD, 3);
  void* k = random_bf16(size_t(n + kSlack) * kHkv * kD, 1);
  void* v = random_bf16(size_t(n + kSlack) * kHkv * kD, 2);
  void* out = random_bf16(size_t(n + kSlack) * kH * kD, 4);
  void* q4 = random_bf16(size_t(n) * kH * kD, 13, 4.f);
  void* k4 = random_bf16(size_t(n) * kHkv * kD, 11, 4.f);
  const float scale = 1.f / std::sqrt(float(kD));
  const double flops = 2.0 * double(n) * n * kD * kH;
  vlm::cuda::CudnnAttentionShape shape;
  shape.seq_q = shape.seq_kv = n;
  shape.heads = kH;
  shape.kv_heads = kHkv;
  shape.head_dim = kD;
  shape.causal = true;
  std::string why;
  vlm::cuda::CudnnAttention att;  // default options, as CudaCudnnPrefill's
  if (!att.prepare(shape, &why)) {
    std::printf("inmodel tokens=%d: no plan: %s\n", n, why.c_str());
    return;
  }
  // Standalone, each candidate (a second CudnnAttention so select() leaves `att` alone).
  vlm::cuda::CudnnAttentionOptions fixed;  // heuristics A's candidates, then B's
  fixed.autotune = 0;
  fixed.both_heuristics = true;
  vlm::cuda::CudnnAttention each(fixed);
  each.prepare(shape, &why);
  std::printf("%s", each.log(shape).c_str());
  for (int c = 0; c < each.num_candidates(shape); ++c) {
    each.select(shape, c);
    Layers r;
    nvml.start();
    r.attn_ms = median_ms(3, n <= 8192 ? 20 : 7, 1, [&](int) { each.run(shape, q, k, v, out, scale, nullptr, &why); });
    r.st = nvml.stop();
    const std::string row = "standalone_config=" + std::to_string(c);
    print_row(row.c_str(), n, r, flops);
  }
  vlm::cuda::CudnnAttentionOptions tuned;
  tuned.autotune = 1;
  vlm::cuda::CudnnAttention auto_att(tuned);
  if (auto_att.run(shape, q, k, v, out, scale, nullptr, &why)) {
    std::printf("inmodel tokens=%d autotune picked config=%d of:", n, auto_att.selected(shape));
    for (float ms : auto_att.autotune_ms(shape)) std::printf(" %.3f", ms);
    std::printf(" ms\n");
  }
  // The decoder's call, 28 layers, with and without a layer's GEMMs before each attention.
  vlm::cuda::CublasLtGemm gemm;
  void* x = random_bf16(size_t(n) * kHidden, 21);
  void* wqkv = random_bf16(size_t(kQkv) * kHidden, 22);
  void* wo = random_bf16(size_t(kHidden) * kHidden, 23);
  void* wgu = random_bf16(size_t(2) * kInter * kHidden, 24);
  void* wd = random_bf16(size_t(kHidden) * kInter, 25);
  void* yqkv = random_bf16(size_t(n) * kQkv, 26);
  void* gu = random_bf16(size_t(n) * 2 * kInter, 27);  // gate/up out; its first n x 18944 feed down
  void* y = random_bf16(size_t(n) * kHidden, 28);
  auto attend = [&] {
    ok(cudaMemsetAsync(static_cast<char*>(k) + size_t(n) * row_kv, 0, kSlack * row_kv, nullptr), "memset");
    ok(cudaMemsetAsync(static_cast<char*>(v) + size_t(n) * row_kv, 0, kSlack * row_kv, nullptr), "memset");
    if (!att.run(shape, q, k, v, out, scale, nullptr, &why)) std::printf("inmodel run failed: %s\n", why.c_str());
  };
  auto gemms = [&] {  // one layer's products (the decoder's residual adds: beta 1 into y)
    gemm.linear(x, wqkv, DType::BF16, nullptr, yqkv, DType::BF16, 0.f, n, kQkv, kHidden, nullptr);
    gemm.linear(x, wo, DType::BF16, nullptr, y, DType::BF16, 1.f, n, kHidden, kHidden, nullptr);
    gemm.linear(x, wgu, DType::BF16, nullptr, gu, DType::BF16, 0.f, n, 2 * kInter, kHidden, nullptr);
    gemm.linear(gu, wd, DType::BF16, nullptr, y, DType::BF16, 1.f, n, kHidden, kInter, nullptr);
  };
  auto layers = [&](bool with_gemms) {
    std::vector<cudaEvent_t> ev(3 * kLayers);
    for (auto& e : ev) ok(cudaEventCreate(&e), "event");
    for (int l = 0; l < 4; ++l) {  // warm-up (cuBLASLt's plans too)
      if (with_gemms) gemms();
      attend();
    }
    ok(cudaDeviceSynchronize(), "sync");
    Layers r;
    nvml.start();
    for (int l = 0; l < kLayers; ++l) {
      ok(cudaEventRecord(ev[3 * l]), "record");
      if (with_gemms) gemms();
      ok(cudaEventRecord(ev[3 * l + 1]), "record");
      attend();
      ok(cudaEventRecord(ev[3 * l + 2]), "record");
    }
    ok(cudaDeviceSynchronize(), "sync");
    r.st = nvml.stop();
    std::vector<float> attn(kLayers);
    double gemm_sum = 0;
    for (int l = 0; l < kLayers; ++l) {
      float g = 0;
      ok(cudaEventElapsedTime(&g, ev[3 * l], ev[3 * l + 1]), "elapsed");
      ok(cudaEventElapsedTime(&attn[l], ev[3 * l + 1], ev[3 * l + 2]), "elapsed");
      gemm_sum += g;
    }
    for (auto& e : ev) cudaEventDestroy(e);
    std::sort(attn.begin(), attn.end());
    r.attn_ms = attn[kLayers / 2];
    r.gemm_ms = with_gemms ? gemm_sum / kLayers : 0;
    return r;
  };
  print_row("inmodel", n, layers(false), flops);
  print_row("inmodel+gemm", n, layers(true), flops);
  print_row("inmodel", n, layers(false), flops);  // again after the load (the chip's clock recovering?)
  Layers r;
  nvml.start();
  r.attn_ms = median_ms(3, n <= 8192 ? 20 : 7, 1, [&](int) { att.run(shape, q4, k4, v, out, scale, nullptr, &why); });
  r.st = nvml.stop();
  print_row("standalone_qk_x4", n, r, flops);
  for (void* p : {q, k, v, out, q4, k4, x, wqkv, wo, wgu, wd, yqkv, gu, y}) cudaFree(p);
}

}  // namespace vlm::bench

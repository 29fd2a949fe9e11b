// Times the decode linear products of one Qwen2-7B layer over FP8 weights, each form beside the
// others (issue 43's speed bars): q/k/v [4608, 3584] (bf16 out + bias), o_proj [3584, 3584] and
// down_proj [3584, 18944] (f32 += : the residual add), gate/up [2 x 18944, 3584] with SiLU·mul.
//  - rows 1, 2, 4: fp8_gemv (and fp8_gemv_silu_mul) in its Simple and Pipelined forms, fp8_gemv_v2.h's
//    deeper form ("gemv_v2"), and the bf16 GEMV (kernels/cuda/gemm/gemv.h) on the same shape for the
//    16-bit read rate; for the products with a pre-norm in the model (q/k/v, gate/up) also the norm
//    and the product: rms_norm then the Simple form ("rms+simple", as the model ran them) against
//    the norm folded in (fp8_gemv_v2.h's fp8_gemv_norm / _silu_mul_norm: "norm_v2");
//  - rows 8, 16, 32, 64: quantize_fp8_rows + fp8_tile_gemm ("quant+tile(S=<splits>)", the model's split; then "tile_S<n>" with the split
//    forced to 1, 2, 4, 8: the split model's check), quantize_fp8_rows +
//    CublasLtGemm::linear_fp8 (+ silu_mul for gate/up; the unfused form where cuBLASLt refuses the
//    fused one), and the bf16 cuBLASLt GEMM (these two as VLM_CUBLASLT_AUTOTUNE says);
//  - rows 1, 8, 16, 32, 64: the cuBLASLt GEMM alone (FP8: over activations quantized beforehand;
//    gate/up: the [M, 2I] product, no SiLU·mul), bf16 and FP8, with the heuristic's first algorithm
//    ("lt_bf16_first", "lt_fp8_first") and autotuned ("lt_bf16_tuned", "lt_fp8_tuned":
//    kernels/cuda/gemm/cublaslt_autotune.h, tuned on the first of the warm-up calls); --verbose logs
//    each shape's candidates and choice (debug level).
// Device events around 20 calls queued back to back (after 5 warm-up calls), rotating among
// enough weight copies that the working set exceeds the L2; median of 5 repeats. Output: one line
// per (shape, rows, form): "fp8lin <shape> M=<rows> <form> us=<per call> GB/s=<weight bytes / time>
// peak%=<of --peak GB/s (default 4800: H200 HBM3e)>".
// Usage: bench_cuda_fp8_linear [--peak GBPS] [--verbose]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/core/dtype.h"
#include "kernels/core/log.h"
#include "kernels/cuda/core/device_buffer.h"
#include "kernels/cuda/gemm/cublaslt_gemm.h"
#include "kernels/cuda/gemm/fp8_gemv.h"
#include "kernels/cuda/gemm/fp8_gemv_v2.h"
#include "kernels/cuda/gemm/fp8_quantize.h"
#include "kernels/cuda/gemm/fp8_tile_gemm.h"
#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/ops/ops_cuda.h"

namespace {

using vlm::DType;
using vlm::cuda::DeviceBuffer;

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// n bytes of a random host pattern: E4M3 values without NaN (fp8) or bf16 values in [-1, 1].
DeviceBuffer random_bytes(size_t n, bool fp8, uint32_t seed) {
  DeviceBuffer b(n);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  const size_t pat = std::min<size_t>(n, size_t(1) << 24);
  std::vector<uint8_t> h(pat);
  for (size_t i = 0; i < pat; i += 2) {
    if (fp8) {
      for (size_t j = i; j < std::min(pat, i + 2); ++j) {
        uint8_t v = static_cast<uint8_t>(rng());
        if ((v & 0x7f) == 0x7f) v ^= 1;
        h[j] = v;
      }
    } else {
      const uint16_t v = vlm::f32_to_bf16(uni(rng));
      std::memcpy(&h[i], &v, std::min<size_t>(2, pat - i));
    }
  }
  for (size_t i = 0; i < n; i += pat)
    ok(cudaMemcpy(b.as<uint8_t>() + i, h.data(), std::min(pat, n - i), cudaMemcpyHostToDevice), "fill");
  return b;
}

DeviceBuffer filled_f32(size_t n, float v) {
  std::vector<float> h(n, v);
  DeviceBuffer b(n * 4);
  ok(cudaMemcpy(b.get(), h.data(), n * 4, cudaMemcpyHostToDevice), "fill");
  return b;
}

// Median microseconds per call of f(copy) over 20 calls, copy = call % copies.
double time_us(const std::function<void(int)>& f, int copies) {
  cudaEvent_t a, b;
  ok(cudaEventCreate(&a), "event");
  ok(cudaEventCreate(&b), "event");
  for (int i = 0; i < 5; ++i) f(i % copies);
  std::vector<double> us;
  for (int rep = 0; rep < 5; ++rep) {
    ok(cudaEventRecord(a), "record");
    for (int i = 0; i < 20; ++i) f(i % copies);
    ok(cudaEventRecord(b), "record");
    ok(cudaEventSynchronize(b), "sync");
    float ms = 0;
    ok(cudaEventElapsedTime(&ms, a, b), "elapsed");
    us.push_back(ms * 1000.0 / 20);
  }
  ok(cudaGetLastError(), "launch");
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

struct Shape {
  const char* name;
  int64_t N, K;  // N: output columns (gate/up: 2I)
  bool silu, residual, bias;
};

}  // namespace

int main(int argc, char** argv) {
  double peak = 4800;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--peak" && i + 1 < argc) peak = std::atof(argv[i + 1]);
    if (std::string(argv[i]) == "--verbose") vlm::set_log_level("debug");
  }
  vlm::cuda::CublasLtGemm gemm;  // as VLM_CUBLASLT_AUTOTUNE says
  vlm::cuda::CublasLtGemm gemm_first(vlm::cuda::LtAutotune::Off), gemm_tuned(vlm::cuda::LtAutotune::On);
  const Shape shapes[] = {{"qkv", 4608, 3584, false, false, true},
                          {"o_proj", 3584, 3584, false, true, false},
                          {"gate_up", 2 * 18944, 3584, true, false, false},
                          {"down", 3584, 18944, false, true, false}};
  for (const Shape& sh : shapes) {
    const int64_t N = sh.N, K = sh.K, I = N / 2;
    const size_t w8 = static_cast<size_t>(N * K), w16 = 2 * w8;
    const int copies = static_cast<int>(std::max<size_t>(2, (size_t(256) << 20) / w8 + 1));
    const int copies16 = static_cast<int>(std::max<size_t>(2, (size_t(256) << 20) / w16 + 1));
    DeviceBuffer wq = random_bytes(w8 * copies, true, 1), w16b = random_bytes(w16 * copies16, false, 2);
    DeviceBuffer ws = filled_f32(N, 1e-3f), bias = random_bytes(N * 2, false, 3);
    DeviceBuffer x = random_bytes(64 * K * 2, false, 4), xq(64 * K), xs(64 * 4);
    DeviceBuffer y(64 * N * 4), inner(64 * N * 2), tmp(64 * N * 4);
    DeviceBuffer xf = filled_f32(4 * K, 0.5f), nw = filled_f32(K, 1.0f), h(4 * K * 2);  // the norm rows: f32 in, bf16 out
    DeviceBuffer part(static_cast<size_t>(16 * 64 * N) * 4);  // [S <= 16, M, N] f32
    const DType out_dt = sh.residual ? DType::F32 : DType::BF16;
    const void* b = sh.bias ? bias.get() : nullptr;
    auto wq_at = [&](int c) { return wq.as<uint8_t>() + size_t(c) * w8; };
    auto w16_at = [&](int c) { return w16b.as<uint8_t>() + size_t(c) * w16; };
    auto report = [&](int64_t M, const char* form, double us, size_t bytes) {
      const double gbs = bytes / us / 1e3;
      std::printf("fp8lin %s M=%lld %s us=%.2f GB/s=%.0f peak%%=%.1f\n", sh.name, static_cast<long long>(M), form, us,
                  gbs, 100.0 * gbs / peak);
      std::fflush(stdout);
    };
    for (const int64_t M : {1, 2, 4}) {
      for (const auto form : {vlm::cuda::Fp8GemvForm::Simple, vlm::cuda::Fp8GemvForm::Pipelined}) {
        const double us = time_us(
            [&](int c) {
              if (sh.silu)
                vlm::cuda::fp8_gemv_silu_mul(x.get(), wq_at(c), ws.as<float>(), DType::BF16, nullptr, inner.get(), M, I,
                                             K, nullptr, form);
              else
                vlm::cuda::fp8_gemv(x.get(), wq_at(c), ws.as<float>(), DType::BF16, b, y.get(), DType::BF16, false, M,
                                    N, K, nullptr, form);
            },
            copies);
        report(M, form == vlm::cuda::Fp8GemvForm::Simple ? "gemv_simple" : "gemv_pipelined", us, w8);
      }
      const double v2 = time_us(
          [&](int c) {
            if (sh.silu)
              vlm::cuda::fp8_gemv_silu_mul_v2(x.get(), wq_at(c), ws.as<float>(), DType::BF16, nullptr, inner.get(), M, I,
                                              K, nullptr);
            else
              vlm::cuda::fp8_gemv_v2(x.get(), wq_at(c), ws.as<float>(), DType::BF16, b, y.get(), DType::BF16, false, M,
                                     N, K, nullptr);
          },
          copies);
      report(M, "gemv_v2", v2, w8);
      if (!sh.residual) {  // q/k/v and gate/up: the pre-norm apart (as before) or folded in
        const double unfused = time_us(
            [&](int c) {
              vlm::cuda::rms_norm(xf.as<float>(), nullptr, nw.as<float>(), 1e-6f, nullptr, M, K, h.get(), DType::BF16,
                                  nullptr);
              if (sh.silu)
                vlm::cuda::fp8_gemv_silu_mul(h.get(), wq_at(c), ws.as<float>(), DType::BF16, nullptr, inner.get(), M, I,
                                             K, nullptr, vlm::cuda::Fp8GemvForm::Simple);
              else
                vlm::cuda::fp8_gemv(h.get(), wq_at(c), ws.as<float>(), DType::BF16, b, y.get(), DType::BF16, false, M,
                                    N, K, nullptr, vlm::cuda::Fp8GemvForm::Simple);
            },
            copies);
        report(M, "rms+simple", unfused, w8);
        const double fused = time_us(
            [&](int c) {
              if (sh.silu)
                vlm::cuda::fp8_gemv_silu_mul_norm(xf.as<float>(), nullptr, nw.as<float>(), 1e-6f, wq_at(c),
                                                  ws.as<float>(), DType::BF16, nullptr, inner.get(), M, I, K, nullptr);
              else
                vlm::cuda::fp8_gemv_norm(xf.as<float>(), nullptr, nw.as<float>(), 1e-6f, wq_at(c), ws.as<float>(),
                                         DType::BF16, b, y.get(), DType::BF16, false, M, N, K, nullptr);
            },
            copies);
        report(M, "norm_v2", fused, w8);
      }
      const double us = time_us(
          [&](int c) {
            if (sh.silu)
              vlm::cuda::gemv_silu_mul(x.get(), w16_at(c), DType::BF16, nullptr, inner.get(), M, I, K, nullptr);
            else
              vlm::cuda::gemv(x.get(), w16_at(c), DType::BF16, b, y.get(), DType::BF16, false, M, N, K, nullptr);
          },
          copies16);
      report(M, "bf16_gemv", us, w16);
    }
    for (const int64_t M : {8, 16, 32, 64}) {
      for (const int forced : {0, 1, 2, 4, 8}) {
        vlm::cuda::fp8_tile_set_split_override(forced);
        const int64_t tpf = vlm::cuda::fp8_tile_partial_floats(M, N, K, sh.silu);  // <= 16 M N: fits `part`
        const int S = vlm::cuda::fp8_tile_splits(M, N, K, sh.silu);
        const double tile = time_us(
            [&](int c) {
              vlm::cuda::quantize_fp8_rows(x.get(), DType::BF16, M, K, xq.as<uint8_t>(), xs.as<float>(), nullptr);
              float* p = tpf > 0 ? part.as<float>() : nullptr;
              if (sh.silu)
                vlm::cuda::fp8_tile_gemm_silu_mul(xq.as<uint8_t>(), xs.as<float>(), wq_at(c), ws.as<float>(), nullptr,
                                                  inner.get(), M, I, K, p, nullptr);
              else
                vlm::cuda::fp8_tile_gemm(xq.as<uint8_t>(), xs.as<float>(), wq_at(c), ws.as<float>(), b, y.get(), out_dt,
                                         sh.residual, M, N, K, p, nullptr);
            },
            copies);
        const std::string form = forced == 0 ? "quant+tile(S=" + std::to_string(S) + ")" : "tile_S" + std::to_string(S);
        report(M, form.c_str(), tile, w8);
      }
      vlm::cuda::fp8_tile_set_split_override(0);
      const double lt = time_us(
          [&](int c) {
            vlm::cuda::quantize_fp8_rows(x.get(), DType::BF16, M, K, xq.as<uint8_t>(), xs.as<float>(), nullptr);
            const float beta = sh.residual ? 1.f : 0.f;
            if (!gemm.linear_fp8(xq.get(), xs.as<float>(), wq_at(c), ws.as<float>(), b, sh.silu ? inner.get() : y.get(),
                                 sh.silu ? DType::BF16 : out_dt, beta, M, N, K, nullptr))
              gemm.linear_fp8(xq.get(), xs.as<float>(), wq_at(c), ws.as<float>(), b, sh.silu ? inner.get() : y.get(),
                              sh.silu ? DType::BF16 : out_dt, beta, M, N, K, nullptr, tmp.as<float>());
            if (sh.silu) vlm::cuda::silu_mul(inner.get(), M, I, y.get(), DType::BF16, nullptr);
          },
          copies);
      report(M, "quant+cublaslt", lt, w8);
      const double bf = time_us(
          [&](int c) {
            gemm.linear(x.get(), w16_at(c), DType::BF16, sh.silu ? nullptr : b, sh.silu ? inner.get() : y.get(),
                        sh.silu ? DType::BF16 : out_dt, sh.residual ? 1.f : 0.f, M, N, K, nullptr);
          },
          copies16);
      report(M, "bf16_cublaslt", bf, w16);
    }
    for (const int64_t M : {1, 8, 16, 32, 64}) {
      vlm::cuda::quantize_fp8_rows(x.get(), DType::BF16, M, K, xq.as<uint8_t>(), xs.as<float>(), nullptr);
      const DType dt = sh.silu ? DType::BF16 : out_dt;
      void* out = sh.silu ? inner.get() : y.get();
      const float beta = sh.residual ? 1.f : 0.f;
      for (const bool tuned : {false, true}) {
        vlm::cuda::CublasLtGemm& g = tuned ? gemm_tuned : gemm_first;
        const double bf = time_us(
            [&](int c) { g.linear(x.get(), w16_at(c), DType::BF16, b, out, dt, beta, M, N, K, nullptr); }, copies16);
        report(M, tuned ? "lt_bf16_tuned" : "lt_bf16_first", bf, w16);
        const double f8 = time_us(
            [&](int c) {
              g.linear_fp8(xq.get(), xs.as<float>(), wq_at(c), ws.as<float>(), b, out, dt, beta, M, N, K, nullptr,
                           tmp.as<float>());
            },
            copies);
        report(M, tuned ? "lt_fp8_tuned" : "lt_fp8_first", f8, w8);
      }
    }
  }
  const auto& st = gemm_tuned.autotune_stats();
  std::printf("fp8lin autotune shapes tuned=%lld changed=%lld cached=%lld\n", static_cast<long long>(st.tuned),
              static_cast<long long>(st.changed), static_cast<long long>(st.cached));
  return 0;
}

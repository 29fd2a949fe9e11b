// Times the CUDA attention kernels on one layer of Qwen2-7B attention (28 query heads, 4 KV heads,
// D = 128, bf16 activations and cache, block size 16, blocks shuffled unless
// BENCH_BLOCKS=contiguous): causal prefill of one sequence at 8K and 32K tokens, and decode of 1
// and 64 sequences at 1K, 32K and 128K context.
// Device events around each call (decode: around 10 calls queued back to back), warm-up first,
// median of the repeats; decode rotates among
// enough cache copies that the working set exceeds the L2. Run beside bench/cuda/sdpa_attention.py
// (torch SDPA, FlashAttention backend) in the same call: bench/cuda/run_attention_bench.sh.
// Output: one line per shape, "ours <kind> ... ms=<median> <rate>" (decode: a second line with
// "reduce=merged", the split reduce merged into the split kernel).
// Argument "cudnn": the prefill shapes, ours beside cuDNN's fused flash attention
// (kernels/cuda/attention/cudnn_attention.h) on contiguous q/k/v of the same shape, one line per
// finalized engine config ("cudnn prefill tokens=... config=<i> ms=... tflops=..."), trying
// heuristics A, then with a stats output, then B and FALLBACK, until one builds; each attempt's
// cuDNN log is printed.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/core/dtype.h"
#include "kernels/cuda/attention/cuda_attention.h"
#include "kernels/cuda/attention/cudnn_attention.h"
#include "kernels/cuda/gemm/cublaslt_gemm.h"
#include "bench/cuda/nvml_sampler.h"

namespace {

using vlm::DType;
constexpr int kH = 28, kHkv = 4, kD = 128, kB = 16;

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Device buffer of n bf16 values, filled from a random host pattern (not zeros) in [-amp, amp].
void* random_bf16(size_t n, uint32_t seed, float amp = 1.f) {
  void* p = nullptr;
  ok(cudaMalloc(&p, n * 2), "malloc");
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-amp, amp);
  const size_t pat = std::min<size_t>(n, size_t(1) << 22);
  std::vector<uint16_t> h(pat);
  for (auto& x : h) x = vlm::f32_to_bf16(uni(rng));
  for (size_t i = 0; i < n; i += pat)
    ok(cudaMemcpy(static_cast<uint16_t*>(p) + i, h.data(), std::min(pat, n - i) * 2, cudaMemcpyHostToDevice), "fill");
  return p;
}

int32_t* upload(const std::vector<int32_t>& v) {
  int32_t* p = nullptr;
  ok(cudaMalloc(&p, v.size() * 4), "malloc");
  ok(cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice), "copy");
  return p;
}

// Median over reps of the time per call, each rep timing `batch` calls queued back to back (so a
// short kernel's time is the device's, not the host's launch latency).
template <class Fn>
double median_ms(int warmup, int reps, int batch, Fn&& fn) {
  cudaEvent_t a, b;
  ok(cudaEventCreate(&a), "event");
  ok(cudaEventCreate(&b), "event");
  for (int i = 0; i < warmup; ++i) fn(i);
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) {
    ok(cudaEventRecord(a), "record");
    for (int j = 0; j < batch; ++j) fn(i * batch + j);
    ok(cudaEventRecord(b), "record");
    ok(cudaEventSynchronize(b), "sync");
    ok(cudaEventElapsedTime(&ms[i], a, b), "elapsed");
    ms[i] /= batch;
  }
  ok(cudaGetLastError(), "launch");
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms[reps / 2];
}

// The batch of `seqs` sequences, each with q_len rows over ctx cached tokens in shuffled blocks.
struct Batch {
  vlm::cuda::CudaAttentionBatch b;
  int64_t num_blocks = 0;
  std::vector<int32_t*> owned;
  Batch(int seqs, int q_len, int ctx, uint32_t seed) {
    const int per = (ctx + kB - 1) / kB;
    num_blocks = int64_t(seqs) * per;
    std::vector<int32_t> table(num_blocks), cu(seqs + 1), lens(seqs, ctx);
    std::iota(table.begin(), table.end(), 0);
    // BENCH_BLOCKS=contiguous: blocks in order (the layout bench_cuda_decoder's prefill gets).
    const char* order = std::getenv("BENCH_BLOCKS");
    if (order == nullptr || std::string(order) != "contiguous") std::shuffle(table.begin(), table.end(), std::mt19937(seed));
    for (int s = 0; s <= seqs; ++s) cu[s] = s * q_len;
    owned = {upload(cu), upload(lens), upload(table)};
    b.num_seqs = seqs;
    b.cu_seqlens_q = owned[0];
    b.context_lens = owned[1];
    b.block_tables = owned[2];
    b.max_blocks_per_seq = per;
    b.max_q_len = q_len;
    b.max_context_len = ctx;
  }
  ~Batch() {
    for (int32_t* p : owned) cudaFree(p);
  }
};

vlm::PagedKVLayer layer(void* k, void* v, int64_t num_blocks) {
  vlm::PagedKVLayer kv;
  kv.k = k;
  kv.v = v;
  kv.dtype = DType::BF16;
  kv.num_blocks = num_blocks;
  kv.block_size = kB;
  kv.num_kv_heads = kHkv;
  kv.head_dim = kD;
  return kv;
}

void bench_prefill(int n) {
  Batch batch(1, n, n, 7);
  const size_t cache = size_t(batch.num_blocks) * kHkv * kB * kD;
  void* k = random_bf16(cache, 1);
  void* v = random_bf16(cache, 2);
  void* q = random_bf16(size_t(n) * kH * kD, 3);
  void* out = random_bf16(size_t(n) * kH * kD, 4);
  const vlm::PagedKVLayer kv = layer(k, v, batch.num_blocks);
  const float scale = 1.f / std::sqrt(float(kD));
  const double ms = median_ms(3, n <= 8192 ? 20 : 7, 1, [&](int) {
    vlm::cuda::paged_prefill_attention(q, DType::BF16, kH, kv, batch.b, scale, out, nullptr);
  });
  const double flops = 2.0 * double(n) * n * kD * kH;  // causal: half of 4 N^2 D H
  std::printf("ours prefill tokens=%d ms=%.3f tflops=%.1f\n", n, ms, flops / ms * 1e-9);
  for (void* p : {k, v, q, out}) cudaFree(p);
}

void bench_decode(int seqs, int ctx) {
  Batch batch(seqs, 1, ctx, 11);
  const size_t cache = size_t(batch.num_blocks) * kHkv * kB * kD;
  const double bytes = 2.0 * cache * 2;  // K and V, bf16
  const int copies = int(std::clamp(std::ceil(256e6 / bytes), 1.0, 64.0));  // beyond the 50 MB L2
  std::vector<void*> ks, vs;
  for (int c = 0; c < copies; ++c) {
    ks.push_back(random_bf16(cache, 20 + c));
    vs.push_back(random_bf16(cache, 90 + c));
  }
  void* q = random_bf16(size_t(seqs) * kH * kD, 5);
  void* out = random_bf16(size_t(seqs) * kH * kD, 6);
  void* ws = nullptr;
  ok(cudaMalloc(&ws, vlm::cuda::paged_decode_workspace_bytes(seqs, kH, kHkv, kD, ctx)), "malloc");
  void* counters = nullptr;  // the merged reduce's (zero; each call leaves them zero)
  ok(cudaMalloc(&counters, size_t(seqs) * kHkv * 4), "malloc");
  ok(cudaMemset(counters, 0, size_t(seqs) * kHkv * 4), "memset");
  const float scale = 1.f / std::sqrt(float(kD));
  // The reduce kernel, then the reduce merged into the split kernel (where the plan has at most
  // VLM_CUDA_DECODE_MERGED_REDUCE_MAX_SPLITS splits a head, default 32; else the same launches).
  for (bool merged : {false, true}) {
    const double ms = median_ms(5, 30, 10, [&](int i) {
      const vlm::PagedKVLayer kv = layer(ks[i % copies], vs[i % copies], batch.num_blocks);
      vlm::cuda::paged_decode_attention(q, DType::BF16, kH, kv, batch.b, scale, out, ws, nullptr,
                                        merged ? static_cast<int32_t*>(counters) : nullptr);
    });
    std::printf("ours decode seqs=%d ctx=%d%s ms=%.4f gbps=%.0f\n", seqs, ctx, merged ? " reduce=merged" : "", ms,
                bytes / ms * 1e-6);
  }
  for (void* p : ks) cudaFree(p);
  for (void* p : vs) cudaFree(p);
  for (void* p : {q, out, ws, counters}) cudaFree(p);
}

// cuDNN's fused attention on contiguous q [n, H, D], k/v [n, Hkv, D]: every candidate config timed.
void bench_cudnn_prefill(int n) {
  void* k = random_bf16(size_t(n) * kHkv * kD, 1);
  void* v = random_bf16(size_t(n) * kHkv * kD, 2);
  void* q = random_bf16(size_t(n) * kH * kD, 3);
  void* out = random_bf16(size_t(n) * kH * kD, 4);
  vlm::cuda::CudnnAttentionShape shape;
  shape.seq_q = shape.seq_kv = n;
  shape.heads = kH;
  shape.kv_heads = kHkv;
  shape.head_dim = kD;
  const float scale = 1.f / std::sqrt(float(kD));
  const double flops = 2.0 * double(n) * n * kD * kH;
  struct Try {
    const char* name;
    vlm::cuda::CudnnAttentionOptions o;
  };
  const Try tries[] = {{"heur A", {3, false, 8}}, {"heur A + stats output", {3, true, 8}},
                       {"heur B", {1, false, 8}}, {"heur FALLBACK", {2, false, 8}}};
  for (const Try& t : tries) {
    vlm::cuda::CudnnAttention att(t.o);
    std::string why;
    if (!att.available(&why)) {
      std::printf("cudnn unavailable: %s\n", why.c_str());
      break;
    }
    const bool ok = att.prepare(shape, &why);
    std::printf("cudnn %zu (%s) tokens=%d %s: %s\n%s", att.version(), att.library_path().c_str(), n, t.name,
                ok ? "plan built" : "no plan", att.log(shape).c_str());
    if (!ok) continue;
    for (int c = 0; c < att.num_candidates(shape); ++c) {
      att.select(shape, c);
      bool run_ok = true;
      const double ms = median_ms(3, n <= 8192 ? 20 : 7, 1, [&](int) {
        if (run_ok && !att.run(shape, q, k, v, out, scale, nullptr, &why)) run_ok = false;
      });
      if (!run_ok) std::printf("cudnn prefill tokens=%d config=%d run failed: %s\n", n, c, why.c_str());
      else std::printf("cudnn prefill tokens=%d config=%d ms=%.3f tflops=%.1f\n", n, c, ms, flops / ms * 1e-9);
    }
    break;
  }
  for (void* p : {k, v, q, out}) cudaFree(p);
}

// A chunk of q rows over ctx cached tokens (the chunk's own rows last), causal bottom-right: ours
// (paged_prefill_attention on the shuffled paged cache) beside cuDNN's padded plans on a contiguous
// copy of the context (what CudaCudnnPrefill's gather makes), in a plan of exactly (q, ctx) keys
// and in one of (q, plan_kv) keys with the real lengths given at run time (padding costs nothing
// when the engine honours the GEMM overrides).
void bench_chunk(int q_len, int ctx, int plan_kv) {
  Batch batch(1, q_len, ctx, 9);
  const size_t cache = size_t(batch.num_blocks) * kHkv * kB * kD;
  void* k = random_bf16(cache, 1);
  void* v = random_bf16(cache, 2);
  void* q = random_bf16(size_t(q_len) * kH * kD, 3);
  void* out = random_bf16(size_t(q_len) * kH * kD, 4);
  const vlm::PagedKVLayer kv = layer(k, v, batch.num_blocks);
  const float scale = 1.f / std::sqrt(float(kD));
  const double flops = 4.0 * double(q_len) * (double(ctx) - q_len / 2.0) * kD * kH;
  const double ms = median_ms(2, 7, 1, [&](int) {
    vlm::cuda::paged_prefill_attention(q, DType::BF16, kH, kv, batch.b, scale, out, nullptr);
  });
  std::printf("ours chunk q=%d ctx=%d ms=%.3f tflops=%.1f\n", q_len, ctx, ms, flops / ms * 1e-9);
  void* kc = random_bf16(size_t(plan_kv) * kHkv * kD, 5);
  void* vc = random_bf16(size_t(plan_kv) * kHkv * kD, 6);
  vlm::cuda::CudnnAttention att;
  for (int skv : {ctx, plan_kv}) {
    vlm::cuda::CudnnAttentionShape shape;
    shape.seq_q = q_len;
    shape.seq_kv = skv;
    shape.heads = kH;
    shape.kv_heads = kHkv;
    shape.head_dim = kD;
    shape.bottom_right = true;
    std::string why;
    if (!att.prepare(shape, &why)) {
      std::printf("cudnn chunk q=%d ctx=%d plan_kv=%d: no plan: %s\n", q_len, ctx, skv, why.c_str());
      continue;
    }
    bool run_ok = true;
    const double cms = median_ms(2, 7, 1, [&](int) {
      if (run_ok && !att.run_padded(shape, q_len, ctx, q, kc, vc, out, scale, nullptr, &why)) run_ok = false;
    });
    if (!run_ok) std::printf("cudnn chunk q=%d ctx=%d plan_kv=%d: run failed: %s\n", q_len, ctx, skv, why.c_str());
    else std::printf("cudnn chunk q=%d ctx=%d plan_kv=%d ms=%.3f tflops=%.1f\n", q_len, ctx, skv, cms, flops / cms * 1e-9);
  }
  for (void* p : {k, v, q, out, kc, vc}) cudaFree(p);
}

// Issue 44: cuDNN's attention ran ~497 / ~547 TFLOP/s inside the model (eager profile, 8K / 32K)
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
struct Layers {
  double attn_ms = 0, gemm_ms = 0;  // median attention per layer, mean GEMMs per layer
  vlm::bench::NvmlSampler::Stats st;
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

void bench_inmodel(int n, vlm::bench::NvmlSampler& nvml) {
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

}  // namespace

// Argument "prefill\": the prefill shapes only; "cudnn": the prefill shapes, ours and cuDNN's; "decode
// CTX...": decode of 1 sequence at those contexts (VLM_CUDA_DECODE_MIN_PARTITION sweeps the split length);
// "chunks Q PLAN_KV CTX...": a Q-row chunk over each context, ours and cuDNN's padded plans (bench_chunk);
// "inmodel [N...]": the decoder's cuDNN call beside the standalone one, with and without GEMM load (bench_inmodel).
int main(int argc, char** argv) {
  const bool prefill_only = argc > 1 && std::string(argv[1]) == "prefill";
  const bool with_cudnn = argc > 1 && std::string(argv[1]) == "cudnn";
  cudaDeviceProp prop{};
  ok(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  if (argc > 3 && std::string(argv[1]) == "chunks") {  // chunks Q PLAN_KV CTX...: chunks over cached context
    for (int i = 4; i < argc; ++i) bench_chunk(std::atoi(argv[2]), std::atoi(argv[i]), std::atoi(argv[3]));
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "inmodel") {  // inmodel [N...]: issue 44's rows (bench_inmodel)
    vlm::bench::NvmlSampler nvml;
    if (!nvml.ok()) std::printf("NVML not available: no clock / power columns\n");
    std::vector<int> ns;
    for (int i = 2; i < argc; ++i) ns.push_back(std::atoi(argv[i]));
    if (ns.empty()) ns = {8192, 32768};
    for (int n : ns) bench_inmodel(n, nvml);
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "decode") {  // decode of 1 sequence at the given contexts only
    for (int i = 2; i < argc; ++i) bench_decode(1, std::atoi(argv[i]));
    return 0;
  }
  for (int n : {8192, 32768}) {
    bench_prefill(n);
    if (with_cudnn) bench_cudnn_prefill(n);
  }
  if (prefill_only || with_cudnn) return 0;
  for (int seqs : {1, 64})
    for (int ctx : {1024, 32768, 131072}) bench_decode(seqs, ctx);
  return 0;
}

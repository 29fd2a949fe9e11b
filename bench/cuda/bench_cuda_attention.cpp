// Times the CUDA attention kernels on one layer of Qwen2-7B attention (28 query heads, 4 KV heads,
// D = 128, bf16 activations and cache, block size 16, blocks shuffled unless
// BENCH_BLOCKS=contiguous): causal prefill of one sequence at 8K and 32K tokens, and decode of 1
// and 64 sequences at 1K, 32K and 128K context.
// Device events around each call (decode: around 10 calls queued back to back), warm-up first,
// median of the repeats; decode rotates among
// enough cache copies that the working set exceeds the L2. Run beside bench/cuda/sdpa_attention.py
// (torch SDPA, FlashAttention backend) in the same call: bench/cuda/run_attention_bench.sh.
// Output: one line per shape, "ours <kind> ... ms=<median> <rate>" (decode: a second line with
// "reduce=merged", the split reduce merged into the split kernel; "bar": "ours decode-bar ...
// plan=v1|v2|v3 ... us_per_layer=<median>").
// Argument "cudnn": the prefill shapes, ours beside cuDNN's fused flash attention
// (kernels/cuda/attention/cudnn_attention.h) on contiguous q/k/v of the same shape, one line per
// finalized engine config ("cudnn prefill tokens=... config=<i> ms=... tflops=..."), trying
// heuristics A, then with a stats output, then B and FALLBACK, until one builds; each attempt's
// cuDNN log is printed. Argument "inmodel [N...]": issue 44's rows, cuDNN's call as the decoder
// makes it beside the standalone one, with and without GEMM load (cudnn_inmodel_bench.h).
// Argument "kv-fp8 CTX...": decode of 1 and 64 sequences at those contexts over a bf16 cache and an
// FP8 E4M3 one (--kv-cache-dtype fp8: per-head scales), one line each ("kv=bf16" / "kv=fp8
// form=v2|v3|v4|v1", the reduce merged as the decoder's graphs run it) and the ratio ("fp8 speedup
// seqs=... ctx=... x=<bf16 ms / fp8 ms> form=v2|v3|v4|v1"; issue 43's bar: >= 1.7 at 128K). The FP8
// lines come in pairs: form v2 (converted in registers, the default), then v1 (converted in
// shared memory; VLM_CUDA_FP8_KV_KERNEL=v1), whatever the environment says.
// Argument "short [CTX...]" (default 1024 4096 8192): issues 40/41's decode layer of 1 sequence,
// Qwen3-8B's heads (32/8) and Qwen3-30B-A3B's (32/4), with the q/k norm: "two" =
// rope_split_q_kv_write then paged_decode_attention (the decoder's default plan, merged reduce),
// "fused" = rope_kv_decode_attention (decode_short.h), one line each, "us_per_layer=<median>".
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
#include "kernels/core/fp8.h"
#include "kernels/cuda/attention/cuda_attention.h"
#include "kernels/cuda/attention/cudnn_attention.h"
#include "kernels/cuda/attention/decode_short.h"
#include "bench/cuda/attention_bench_util.h"
#include "bench/cuda/cudnn_inmodel_bench.h"
#include "bench/cuda/nvml_sampler.h"

namespace {

using vlm::DType;
constexpr int kH = 28, kHkv = 4, kD = 128, kB = 16;
using vlm::bench::median_ms;
using vlm::bench::ok;
using vlm::bench::random_bf16;
using vlm::bench::upload;

// Device buffer of n E4M3 bytes of U(-1, 1) values (no NaN bytes).
void* random_fp8(size_t n, uint32_t seed) {
  void* p = nullptr;
  ok(cudaMalloc(&p, n), "malloc");
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  const size_t pat = std::min<size_t>(n, size_t(1) << 22);
  std::vector<uint8_t> h(pat);
  for (auto& x : h) x = vlm::f32_to_fp8_e4m3(uni(rng));
  for (size_t i = 0; i < n; i += pat)
    ok(cudaMemcpy(static_cast<uint8_t*>(p) + i, h.data(), std::min(pat, n - i), cudaMemcpyHostToDevice), "fill");
  return p;
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

vlm::PagedKVLayer layer(void* k, void* v, int64_t num_blocks, int hkv = kHkv) {
  vlm::PagedKVLayer kv;
  kv.k = k;
  kv.v = v;
  kv.dtype = DType::BF16;
  kv.num_blocks = num_blocks;
  kv.block_size = kB;
  kv.num_kv_heads = hkv;
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

// Decode of `seqs` sequences at ctx over h query / hkv KV heads. bar: issue 40's rows instead --
// each plan (DecodeKernel v1, v2, v3) with the merged reduce (the counters the graph decode
// passes; v3 merges in its clusters), one line each with the time per layer in µs. kv: the
// cache's dtype (BF16, or F8_E4M3 with per-head scales of 1.0); only_merged: time the merged
// reduce only (the decoder's graphs). Returns the last line's ms.
double bench_decode(int seqs, int ctx, bool bar = false, int h = kH, int hkv = kHkv, DType kv_dtype = DType::BF16,
                    bool only_merged = false) {
  Batch batch(seqs, 1, ctx, 11);
  const size_t cache = size_t(batch.num_blocks) * hkv * kB * kD;
  const bool fp8 = kv_dtype == DType::F8_E4M3;
  const double bytes = 2.0 * cache * (fp8 ? 1 : 2);  // K and V
  const int copies = int(std::clamp(std::ceil(256e6 / bytes), 1.0, 64.0));  // beyond the 50 MB L2
  std::vector<void*> ks, vs;
  for (int c = 0; c < copies; ++c) {
    ks.push_back(fp8 ? random_fp8(cache, 20 + c) : random_bf16(cache, 20 + c));
    vs.push_back(fp8 ? random_fp8(cache, 90 + c) : random_bf16(cache, 90 + c));
  }
  float* scales = nullptr;  // [Hkv] of 1.0, K's and V's
  ok(cudaMalloc(&scales, hkv * 4), "malloc");
  const std::vector<float> ones(hkv, 1.0f);
  ok(cudaMemcpy(scales, ones.data(), hkv * 4, cudaMemcpyHostToDevice), "copy");
  void* q = random_bf16(size_t(seqs) * h * kD, 5);
  void* out = random_bf16(size_t(seqs) * h * kD, 6);
  void* ws = nullptr;
  ok(cudaMalloc(&ws, vlm::cuda::paged_decode_workspace_bytes(seqs, h, hkv, kD, ctx)), "malloc");
  void* counters = nullptr;  // the merged reduce's (zero; each call leaves them zero)
  ok(cudaMalloc(&counters, size_t(seqs) * hkv * 4), "malloc");
  ok(cudaMemset(counters, 0, size_t(seqs) * hkv * 4), "memset");
  const float scale = 1.f / std::sqrt(float(kD));
  auto time = [&](bool merged, vlm::cuda::DecodeKernel kernel) {
    return median_ms(5, 30, 10, [&](int i) {
      vlm::PagedKVLayer kv = layer(ks[i % copies], vs[i % copies], batch.num_blocks, hkv);
      kv.dtype = kv_dtype;
      if (fp8) kv.k_scale = kv.v_scale = scales;
      vlm::cuda::paged_decode_attention(q, DType::BF16, h, kv, batch.b, scale, out, ws, nullptr,
                                        merged ? static_cast<int32_t*>(counters) : nullptr, kernel);
    });
  };
  double ms = 0;
  if (bar) {
    using vlm::cuda::DecodeKernel;
    for (auto kernel : {DecodeKernel::kV1, DecodeKernel::kV2, DecodeKernel::kV3}) {
      ms = time(true, kernel);
      std::printf("ours decode-bar heads=%d/%d seqs=%d ctx=%d plan=%s reduce=merged us_per_layer=%.2f gbps=%.0f\n", h,
                  hkv, seqs, ctx, kernel == DecodeKernel::kV1 ? "v1" : kernel == DecodeKernel::kV2 ? "v2" : "v3",
                  ms * 1e3, bytes / ms * 1e-6);
    }
  } else {
    // The reduce kernel, then the reduce merged into the split kernel (where the plan has at most
    // VLM_CUDA_DECODE_MERGED_REDUCE_MAX_SPLITS splits a head, default 32; else the same launches).
    for (bool merged : {false, true}) {
      if (only_merged && !merged) continue;
      ms = time(merged, vlm::cuda::DecodeKernel::kAuto);
      std::printf("ours decode seqs=%d ctx=%d%s%s ms=%.4f gbps=%.0f\n", seqs, ctx, merged ? " reduce=merged" : "",
                  only_merged ? (!fp8                                           ? " kv=bf16"
                                 : vlm::cuda::set_fp8_kv_decode_form(0) == 1 ? " kv=fp8 form=v1"  // 0: a query
                                 : vlm::cuda::set_fp8_kv_decode_form(0) == 3 ? " kv=fp8 form=v3"
                                 : vlm::cuda::set_fp8_kv_decode_form(0) == 4 ? " kv=fp8 form=v4"
                                                                             : " kv=fp8 form=v2")
                              : "",
                  ms, bytes / ms * 1e-6);
    }
  }
  for (void* p : ks) cudaFree(p);
  for (void* p : vs) cudaFree(p);
  for (void* p : {q, out, ws, counters, static_cast<void*>(scales)}) cudaFree(p);
  return ms;
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

}  // namespace

// Issues 40/41's rows: RoPE + K/V write + decode attention of `seqs` sequences at ctx over h / hkv
// heads with Qwen3's q/k norm, the two-kernel path and the fused one (decode_short.h), rotating
// among cache copies beyond the L2 as bench_decode does. The same slot is rewritten every call.
void bench_short(int seqs, int ctx, int h, int hkv) {
  Batch batch(seqs, 1, ctx, 11);
  const size_t cache = size_t(batch.num_blocks) * hkv * kB * kD;
  const double bytes = 2.0 * cache * 2;
  const int copies = int(std::clamp(std::ceil(256e6 / bytes), 1.0, 64.0));
  std::vector<void*> ks, vs;
  for (int c = 0; c < copies; ++c) {
    ks.push_back(random_bf16(cache, 20 + c));
    vs.push_back(random_bf16(cache, 90 + c));
  }
  const int w = h + 2 * hkv;
  void* qkv = random_bf16(size_t(seqs) * w * kD, 4);
  void* q = random_bf16(size_t(seqs) * h * kD, 5);
  void* out = random_bf16(size_t(seqs) * h * kD, 6);
  std::vector<float> tab(size_t(seqs) * kD), ones(kD, 1.0f);
  for (int s = 0; s < seqs; ++s)
    for (int i = 0; i < kD / 2; ++i) {
      const double a = (ctx - 1) * std::pow(1e6, -2.0 * i / kD);
      tab[size_t(s * kD + i)] = float(std::cos(a));
      tab[size_t(s * kD + kD / 2 + i)] = float(std::sin(a));
    }
  float *table = nullptr, *nw = nullptr;
  ok(cudaMalloc(&table, tab.size() * 4), "malloc");
  ok(cudaMemcpy(table, tab.data(), tab.size() * 4, cudaMemcpyHostToDevice), "copy");
  ok(cudaMalloc(&nw, kD * 4), "malloc");
  ok(cudaMemcpy(nw, ones.data(), kD * 4, cudaMemcpyHostToDevice), "copy");
  // Slot of each sequence's last position, from the batch's table (downloaded once).
  std::vector<int32_t> tbl(static_cast<size_t>(batch.num_blocks)), slots(static_cast<size_t>(seqs));
  ok(cudaMemcpy(tbl.data(), batch.b.block_tables, tbl.size() * 4, cudaMemcpyDeviceToHost), "copy");
  const int per = batch.b.max_blocks_per_seq;
  for (int s = 0; s < seqs; ++s) slots[size_t(s)] = tbl[size_t(s * per + (ctx - 1) / kB)] * kB + (ctx - 1) % kB;
  int32_t* d_slots = upload(slots);
  void* ws = nullptr;
  ok(cudaMalloc(&ws, vlm::cuda::paged_decode_workspace_bytes(seqs, h, hkv, kD, ctx)), "malloc");
  void* counters = nullptr;
  ok(cudaMalloc(&counters, size_t(seqs) * hkv * 4), "malloc");
  ok(cudaMemset(counters, 0, size_t(seqs) * hkv * 4), "memset");
  const float scale = 1.f / std::sqrt(float(kD));
  vlm::cuda::HeadNorm norm{nw, nw, 1e-6f};
  for (bool fused : {false, true}) {
    const double ms = median_ms(5, 30, 10, [&](int i) {
      const vlm::PagedKVLayer kv = layer(ks[i % copies], vs[i % copies], batch.num_blocks, hkv);
      if (fused) {
        vlm::cuda::rope_kv_decode_attention(qkv, h, table, kD, q, kv, d_slots, batch.b, scale, out, DType::BF16,
                                            nullptr, norm);
      } else {
        vlm::cuda::rope_split_q_kv_write(qkv, seqs, h, table, kD, q, kv, d_slots, DType::BF16, nullptr, norm);
        vlm::cuda::paged_decode_attention(q, DType::BF16, h, kv, batch.b, scale, out, ws, nullptr,
                                          static_cast<int32_t*>(counters));
      }
    });
    std::printf("ours decode-short heads=%d/%d seqs=%d ctx=%d path=%s us_per_layer=%.2f\n", h, hkv, seqs, ctx,
                fused ? "fused" : "two", ms * 1e3);
  }
  for (void* p : ks) cudaFree(p);
  for (void* p : vs) cudaFree(p);
  for (void* p : {qkv, q, out, ws, counters, static_cast<void*>(table), static_cast<void*>(nw),
                  static_cast<void*>(d_slots)})
    cudaFree(p);
}

// Argument "prefill": the prefill shapes only; "cudnn": the prefill shapes, ours and cuDNN's; "decode
// CTX...": decode of 1 sequence at those contexts (VLM_CUDA_DECODE_MIN_PARTITION sweeps the split length);
// "bar": issue 40's decode rows (1 sequence at 1K, 4K, 8K, 32K; 64 x 1K; Qwen3-8B's 32/8 heads at 1K
// and 4K), each with the v1, v2 and v3 plans and the merged reduce, in µs per layer;
// "chunks Q PLAN_KV CTX...": a Q-row chunk over each context, ours and cuDNN's padded plans (bench_chunk);
// "inmodel [N...]": the decoder's cuDNN call beside the standalone one, with and without GEMM load (cudnn_inmodel_bench.h).
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
  if (argc > 1 && std::string(argv[1]) == "inmodel") {  // inmodel [N...]: issue 44's rows (cudnn_inmodel_bench.h)
    vlm::bench::NvmlSampler nvml;
    if (!nvml.ok()) std::printf("NVML not available: no clock / power columns\n");
    std::vector<int> ns;
    for (int i = 2; i < argc; ++i) ns.push_back(std::atoi(argv[i]));
    if (ns.empty()) ns = {8192, 32768};
    for (int n : ns) vlm::bench::bench_cudnn_inmodel(n, nvml);
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "short") {  // short [CTX...]: issues 40/41's fused decode layer
    std::vector<int> ctxs;
    for (int i = 2; i < argc; ++i) ctxs.push_back(std::atoi(argv[i]));
    if (ctxs.empty()) ctxs = {1024, 4096, 8192};
    if (!vlm::cuda::decode_short_supported(layer(nullptr, nullptr, 1, 8), DType::BF16, 32, kD, true, 1, ctxs[0])) {
      std::printf("decode-short: not supported on this GPU (needs sm_90)\n");
      return 0;
    }
    for (int ctx : ctxs)
      for (int hkv : ctx <= vlm::cuda::kDecodeShortMaxContext ? std::vector<int>{8, 4} : std::vector<int>{})
        for (int seqs : {1, 4}) bench_short(seqs, ctx, 32, hkv);
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "bar") {  // issue 40's decode rows, both plans
    for (int ctx : {1024, 4096, 8192, 32768}) bench_decode(1, ctx, true);
    bench_decode(64, 1024, true);
    bench_decode(1, 1024, true, 32, 8);  // Qwen3-8B's heads
    bench_decode(1, 4096, true, 32, 8);
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "kv-fp8") {  // decode over a bf16 and an FP8 cache, side by side
    for (int i = 2; i < argc; ++i)
      for (int seqs : {1, 64}) {
        const double b16 = bench_decode(seqs, std::atoi(argv[i]), false, kH, kHkv, DType::BF16, true);
        // The FP8 forms (decode_attention.cu): v2 (registers, the default), v3 (v2's deep pipeline),
        // v4 (v3, V converted by integer ops), then v1 (shared memory).
        const int before = vlm::cuda::set_fp8_kv_decode_form(2);
        const double f8 = bench_decode(seqs, std::atoi(argv[i]), false, kH, kHkv, DType::F8_E4M3, true);
        vlm::cuda::set_fp8_kv_decode_form(3);
        const double f8v3 = bench_decode(seqs, std::atoi(argv[i]), false, kH, kHkv, DType::F8_E4M3, true);
        vlm::cuda::set_fp8_kv_decode_form(4);
        const double f8v4 = bench_decode(seqs, std::atoi(argv[i]), false, kH, kHkv, DType::F8_E4M3, true);
        vlm::cuda::set_fp8_kv_decode_form(1);
        const double f8v1 = bench_decode(seqs, std::atoi(argv[i]), false, kH, kHkv, DType::F8_E4M3, true);
        vlm::cuda::set_fp8_kv_decode_form(before);
        std::printf("fp8 speedup seqs=%d ctx=%d x=%.2f form=v2\n", seqs, std::atoi(argv[i]), b16 / f8);
        std::printf("fp8 speedup seqs=%d ctx=%d x=%.2f form=v3\n", seqs, std::atoi(argv[i]), b16 / f8v3);
        std::printf("fp8 speedup seqs=%d ctx=%d x=%.2f form=v4\n", seqs, std::atoi(argv[i]), b16 / f8v4);
        std::printf("fp8 speedup seqs=%d ctx=%d x=%.2f form=v1\n", seqs, std::atoi(argv[i]), b16 / f8v1);
      }
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

// Decode attention on the GPU at long context, one layer of Qwen2-7B attention (28 query heads,
// 4 KV heads, D = 128, bf16 activations and cache, blocks of 16, shuffled):
//  sink:   one sequence at 32K / 128K / 512K context, dense paged_decode_attention against
//          SinkRouter's decode as the decoder runs it (the routing launch, anchors read from the
//          sequence's store captured from the cache as at the end of prefill, + the group-skipping
//          kernel, both timed; route_only_ms: the routing launch alone; route_cache_ms: the routing
//          launch reading the anchors from the cache instead) with 60 % of the groups skipped: 5 layer caches in rotation whose planted
//          queries route 3, 2, 3, 2, 2 of the 4 groups (every query head of a sink group = its
//          anchor key, cosine 1; the others random; tau = 0.5), checked on the device's decisions.
//  look-m: 8 sequences of 128K context against 8 of 20 % of it (the cache LOOK-M leaves at a
//          20 % budget), aggregate decode attention per layer; and the end-of-prefill cost of LOOK-M
//          for one layer of one sequence at 32K, 96K and 128K or the lengths given (text-prior-pivot,
//          window scores): the score pass (64 rows; tensor cores and the f32 kernels), the host's and
//          the device's selection of the kept sets, the merge + compaction, the search alone.
// Device events around 10 calls queued back to back, warm-up first, median of the repeats; the
// caches rotate so the working set exceeds the L2.
// Output: one line per shape, "<kind> ... dense_ms=.. ms=.. speedup=..".
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <iterator>
#include <vector>

#include "kernels/core/dtype.h"
#include "kernels/cuda/attention/cuda_attention.h"
#include "kernels/cuda/kv_compression/cuda_look_m.h"
#include "kernels/cuda/sink_router/cuda_sink_router.h"
#include "kernels/kv_compression/look_m_params.h"
#include "kernels/kv_compression/token_selection.h"

namespace {

using vlm::DType;
constexpr int kH = 28, kHkv = 4, kD = 128, kB = 16, kG = kH / kHkv;

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "CUDA error %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

template <class T>
T* device_copy(const std::vector<T>& v) {
  T* p = nullptr;
  check(cudaMalloc(&p, v.size() * sizeof(T)), "malloc");
  check(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "copy");
  return p;
}

std::vector<uint16_t> bf16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = vlm::f32_to_bf16(x[i]);
  return out;
}

// Median ms per call over `reps` repeats of 10 queued calls, after 3 warm-up calls.
template <class Fn>
double time_calls(int reps, Fn&& fn) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  for (int i = 0; i < 3; ++i) fn(i);
  std::vector<float> ms(reps);
  for (int r = 0; r < reps; ++r) {
    check(cudaEventRecord(a), "record");
    for (int j = 0; j < 10; ++j) fn(r * 10 + j);
    check(cudaEventRecord(b), "record");
    check(cudaEventSynchronize(b), "sync");
    check(cudaEventElapsedTime(&ms[r], a, b), "elapsed");
    ms[r] /= 10;
  }
  check(cudaGetLastError(), "launch");
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

// `seqs` sequences of `ctx` tokens over shuffled blocks, `copies` layer caches (zeroed).
struct Layers {
  vlm::cuda::CudaAttentionBatch batch;
  std::vector<vlm::PagedKVLayer> kv;
  std::vector<int32_t> table;
  int64_t blocks = 0;
  Layers(int seqs, int ctx, int copies) {
    const int per = (ctx + kB - 1) / kB;
    blocks = int64_t(seqs) * per;
    table.resize(size_t(blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(3));
    batch.num_seqs = seqs;
    batch.context_lens = device_copy(std::vector<int32_t>(size_t(seqs), ctx));
    batch.block_tables = device_copy(table);
    batch.max_blocks_per_seq = per;
    batch.max_q_len = 1;
    batch.max_context_len = ctx;
    const size_t bytes = size_t(blocks) * kHkv * kB * kD * 2;
    for (int c = 0; c < copies; ++c) {
      vlm::PagedKVLayer l{nullptr, nullptr, DType::BF16, blocks, kB, kHkv, kD};
      check(cudaMalloc(&l.k, bytes), "malloc cache");
      check(cudaMalloc(&l.v, bytes), "malloc cache");
      check(cudaMemset(l.k, 0, bytes), "memset");
      check(cudaMemset(l.v, 0, bytes), "memset");
      kv.push_back(l);
    }
  }
  ~Layers() {
    for (auto& l : kv) {
      cudaFree(l.k);
      cudaFree(l.v);
    }
    cudaFree(const_cast<int32_t*>(batch.context_lens));
    cudaFree(const_cast<int32_t*>(batch.block_tables));
  }
  // Sequence 0's token-0 key of kv head g in copy c (bf16, D values).
  void set_anchor(int c, int g, const std::vector<float>& key) {
    const int64_t off = (int64_t(table[0]) * kHkv + g) * kB * kD;
    check(cudaMemcpy(static_cast<uint16_t*>(kv[size_t(c)].k) + off, bf16(key).data(), kD * 2, cudaMemcpyHostToDevice),
          "anchor");
  }
};

void bench_sink(int ctx) {
  const int copies = 5, pattern[copies] = {3, 2, 3, 2, 2};  // sink groups per copy: 12 / 20
  Layers L(1, ctx, copies);
  std::mt19937 rng(ctx);
  std::normal_distribution<float> nd;
  std::vector<uint16_t*> qs;
  for (int c = 0; c < copies; ++c) {
    std::vector<float> q(kH * kD);
    for (int g = 0; g < kHkv; ++g) {
      std::vector<float> key(kD);
      for (float& x : key) x = nd(rng);
      L.set_anchor(c, g, key);
      for (int i = 0; i < kG; ++i)
        for (int d = 0; d < kD; ++d) q[(g * kG + i) * kD + d] = g < pattern[c] ? key[d] : nd(rng);
    }
    qs.push_back(device_copy(bf16(q)));
  }
  vlm::SinkRouterConfig cfg;  // tau = 0.5, min over the group, zero surrogate
  void *out = nullptr, *ws = nullptr;
  uint8_t* skip = nullptr;
  int32_t* count = nullptr;
  check(cudaMalloc(&out, kH * kD * 2), "malloc");
  check(cudaMalloc(&ws, vlm::cuda::paged_decode_workspace_bytes(1, kH, kHkv, kD, ctx)), "malloc");
  check(cudaMalloc(&skip, kHkv), "malloc");
  check(cudaMalloc(&count, 4), "malloc");
  check(cudaMemset(count, 0, 4), "memset");
  const float scale = 1.f / std::sqrt(float(kD));
  // Each copy's anchor store [2, 1 layer, Hkv, D] f32 and a device pointer to it (one routed row).
  std::vector<float*> stores(copies);
  std::vector<const float* const*> store_ptrs(copies);
  for (int c = 0; c < copies; ++c) {
    check(cudaMalloc(&stores[size_t(c)], 2 * kHkv * kD * 4), "malloc");
    vlm::cuda::sink_capture_anchors(L.kv[size_t(c)], L.batch.block_tables, 0, 1, stores[size_t(c)], nullptr);
    store_ptrs[size_t(c)] = device_copy(std::vector<const float*>{stores[size_t(c)]});
  }
  const double dense = time_calls(15, [&](int i) {
    vlm::cuda::paged_decode_attention(qs[size_t(i % copies)], DType::BF16, kH, L.kv[size_t(i % copies)], L.batch, scale,
                                      out, ws, nullptr);
  });
  int calls = 0;
  const double routed = time_calls(15, [&](int i) {
    const int c = i % copies;
    vlm::cuda::CudaAttentionBatch b = L.batch;
    vlm::cuda::sink_route_from_stores(qs[size_t(c)], DType::BF16, kH, store_ptrs[size_t(c)], 0, 1, kHkv, kD,
                                      b.context_lens, nullptr, 1, cfg, nullptr, skip, count, nullptr, nullptr);
    b.group_skip = skip;
    vlm::cuda::paged_decode_attention(qs[size_t(c)], DType::BF16, kH, L.kv[size_t(c)], b, scale, out, ws, nullptr);
    ++calls;
  });
  int skipped = 0;
  check(cudaMemcpy(&skipped, count, 4, cudaMemcpyDeviceToHost), "count");
  const double route = time_calls(15, [&](int i) {  // the routing launch alone
    const int c = i % copies;
    vlm::cuda::sink_route_from_stores(qs[size_t(c)], DType::BF16, kH, store_ptrs[size_t(c)], 0, 1, kHkv, kD,
                                      L.batch.context_lens, nullptr, 1, cfg, nullptr, skip, nullptr, nullptr, nullptr);
  });
  const double route_cache = time_calls(15, [&](int i) {  // the same, anchors read from the cache
    const vlm::cuda::CudaAttentionBatch& b = L.batch;
    vlm::cuda::sink_route_from_cache(qs[size_t(i % copies)], DType::BF16, kH, L.kv[size_t(i % copies)], b.block_tables,
                                     b.max_blocks_per_seq, b.context_lens, nullptr, 1, cfg, nullptr, skip, nullptr,
                                     nullptr, nullptr);
  });
  const double kv_mib = double(ctx) * kHkv * kD * 2 * 2 / (1 << 20);
  std::printf("sink ctx=%d skipped=%.1f%% dense_ms=%.4f routed_ms=%.4f speedup=%.2f route_only_ms=%.4f "
              "route_cache_ms=%.4f kv_mib=%.0f dense_gbps=%.0f\n",
              ctx, 100.0 * skipped / (calls * kHkv), dense, routed, dense / routed, route, route_cache, kv_mib,
              kv_mib * (1 << 20) / dense * 1e-6);
  for (auto* p : qs) cudaFree(p);
  for (int c = 0; c < copies; ++c) {
    cudaFree(stores[size_t(c)]);
    cudaFree(const_cast<const float**>(store_ptrs[size_t(c)]));
  }
  for (void* p : {out, ws, static_cast<void*>(skip), static_cast<void*>(count)}) cudaFree(p);
}

// Aggregate decode attention of `seqs` sequences at ctx (per layer), 2 caches in rotation.
double decode_ms(int seqs, int ctx) {
  Layers L(seqs, ctx, 2);
  std::vector<float> qh(size_t(seqs) * kH * kD);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  for (float& x : qh) x = nd(rng);
  uint16_t* q = device_copy(bf16(qh));
  void *out = nullptr, *ws = nullptr;
  check(cudaMalloc(&out, qh.size() * 2), "malloc");
  check(cudaMalloc(&ws, vlm::cuda::paged_decode_workspace_bytes(seqs, kH, kHkv, kD, ctx)), "malloc");
  const double ms = time_calls(15, [&](int i) {
    vlm::cuda::paged_decode_attention(q, DType::BF16, kH, L.kv[size_t(i % 2)], L.batch, 1.f / std::sqrt(float(kD)), out,
                                      ws, nullptr);
  });
  for (void* p : {static_cast<void*>(q), out, ws}) cudaFree(p);
  return ms;
}

// Device time of fn(): the first call alone (cold: module load, attributes), then the median of
// `reps` single calls after it.
template <class Fn>
std::pair<float, float> first_and_median_ms(int reps, Fn&& fn) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  std::vector<float> ms(size_t(reps) + 1);
  for (int r = 0; r <= reps; ++r) {
    check(cudaEventRecord(a), "record");
    fn();
    check(cudaEventRecord(b), "record");
    check(cudaEventSynchronize(b), "sync");
    check(cudaEventElapsedTime(&ms[size_t(r)], a, b), "elapsed");
  }
  check(cudaGetLastError(), "launch");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  const float first = ms[0];
  ms.erase(ms.begin());
  std::sort(ms.begin(), ms.end());
  return {first, ms[ms.size() / 2]};
}

// One layer of LOOK-M at the end of a prompt of L tokens (random cache, random window queries):
// each part's first call and warm median, the tensor-core kernels (Auto) beside the f32 ones.
// The compaction rewrites slots [0, C) of the cache; the repeats run on what it left (same cost).
void bench_look_m_compaction(int L) {
  Layers lay(1, L, 1);
  std::vector<float> fill(size_t(L) * kHkv * kD);
  std::mt19937 rng(L);
  std::normal_distribution<float> nd;
  for (float& x : fill) x = nd(rng);
  const std::vector<uint16_t> raw = bf16(fill);  // [blocks, Hkv, B, D]: the layer's K (and V, the same)
  check(cudaMemcpy(lay.kv[0].k, raw.data(), raw.size() * 2, cudaMemcpyHostToDevice), "fill k");
  check(cudaMemcpy(lay.kv[0].v, raw.data(), raw.size() * 2, cudaMemcpyHostToDevice), "fill v");
  const int W = 64;
  std::vector<float> qh(size_t(W) * kH * kD);
  for (float& x : qh) x = nd(rng);
  uint16_t* q = device_copy(bf16(qh));  // [W, H, D] bf16
  float *scores = nullptr, *scores2 = nullptr;
  void *stats = nullptr, *ws = nullptr;
  int32_t* kept = nullptr;
  vlm::LookMParams p;  // text-prior-pivot, 10 % + 10 %
  const vlm::LookMBudget budget = vlm::look_m_budget(p, L);
  const int C = budget.kept();
  check(cudaMalloc(&scores, size_t(kHkv) * L * 4), "malloc");   // [Hkv, L]
  check(cudaMalloc(&scores2, size_t(kHkv) * L * 4), "malloc");  // [Hkv, L], the f32 path's
  check(cudaMalloc(&stats, vlm::cuda::look_m_row_stats_bytes(W, kH, L)), "malloc");
  check(cudaMalloc(&ws, vlm::cuda::look_m_compact_workspace_bytes(L, C, kHkv, kD)), "malloc");
  check(cudaMalloc(&kept, size_t(kHkv) * C * 4), "malloc");  // [Hkv, C]
  const float scale = 1.f / std::sqrt(float(kD));
  auto score = [&](vlm::cuda::LookMSearch how, float* out) {
    check(cudaMemsetAsync(out, 0, size_t(kHkv) * L * 4), "memset");
    vlm::cuda::look_m_accumulate_scores(q, DType::BF16, W, kH, lay.kv[0], lay.batch.block_tables, L - W, scale, stats,
                                        out, L, nullptr, how);
  };
  const auto sc_mma = first_and_median_ms(5, [&] { score(vlm::cuda::LookMSearch::Auto, scores); });
  const auto sc_f32 = first_and_median_ms(3, [&] { score(vlm::cuda::LookMSearch::F32, scores2); });
  check(cudaDeviceSynchronize(), "sync");
  std::vector<float> hs(size_t(kHkv) * L), hs2(hs.size());
  check(cudaMemcpy(hs.data(), scores, hs.size() * 4, cudaMemcpyDeviceToHost), "scores");
  check(cudaMemcpy(hs2.data(), scores2, hs2.size() * 4, cudaMemcpyDeviceToHost), "scores");
  double score_diff = 0;
  for (size_t i = 0; i < hs.size(); ++i)
    score_diff = std::max(score_diff, std::abs(double(hs[i]) - hs2[i]) / std::max(1.0, std::abs(double(hs2[i]))));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<uint8_t> is_text(size_t(L), 1);
  for (int j = L / 10; j < L * 9 / 10; ++j) is_text[size_t(j)] = 0;  // an image span of 80 %
  std::vector<int32_t> hk, hk2;
  for (int h = 0; h < kHkv; ++h) {
    const auto k = vlm::select_kept_tokens(hs.data() + size_t(h) * L, is_text.data(), L, p, budget);
    hk.insert(hk.end(), k.begin(), k.end());
    const auto k2 = vlm::select_kept_tokens(hs2.data() + size_t(h) * L, is_text.data(), L, p, budget);
    hk2.insert(hk2.end(), k2.begin(), k2.end());
  }
  const double host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 2;
  int set_diff = 0;  // kept positions chosen from the tensor-core scores but not from the f32 ones
  for (int h = 0; h < kHkv; ++h) {
    std::vector<int32_t> d;
    std::set_difference(hk.begin() + size_t(h) * C, hk.begin() + size_t(h + 1) * C, hk2.begin() + size_t(h) * C,
                        hk2.begin() + size_t(h + 1) * C, std::back_inserter(d));
    set_diff += int(d.size());
  }
  // The same choice on the device (what CudaLookMStep runs): one layer's Hkv segments.
  uint8_t* dtext = device_copy(is_text);
  const auto sel = first_and_median_ms(5, [&] {
    vlm::cuda::look_m_select_kept(scores, L, kHkv, dtext, L, budget.recent, budget.important, p.text_prior,
                                  p.num_sink_tokens, kept, nullptr);
  });
  std::vector<int32_t> dk(hk.size());
  check(cudaMemcpy(dk.data(), kept, dk.size() * 4, cudaMemcpyDeviceToHost), "kept back");
  const bool same = dk == hk;
  cudaFree(dtext);
  const auto comp = first_and_median_ms(5, [&] {
    vlm::cuda::look_m_compact(lay.kv[0], lay.batch.block_tables, L, kept, C, p.merge, ws, nullptr);
  });
  // The search alone, tensor cores (Auto) and the f32 reference path (not past 131,072: seconds).
  int32_t* arg = nullptr;
  float* w = nullptr;
  check(cudaMalloc(&arg, size_t(kHkv) * L * 4), "malloc");
  check(cudaMalloc(&w, size_t(kHkv) * L * 4), "malloc");
  auto search = [&](vlm::cuda::LookMSearch how) {
    vlm::cuda::look_m_nearest_kept(lay.kv[0], lay.batch.block_tables, L, kept, C, how, ws, arg, w, nullptr);
  };
  const auto se_mma = first_and_median_ms(5, [&] { search(vlm::cuda::LookMSearch::Auto); });
  const std::vector<int32_t> arg_auto = [&] {
    std::vector<int32_t> a(size_t(kHkv) * L);
    check(cudaMemcpy(a.data(), arg, a.size() * 4, cudaMemcpyDeviceToHost), "arg");
    return a;
  }();
  const auto se_sync = first_and_median_ms(5, [&] { search(vlm::cuda::LookMSearch::MmaSync); });
  int arg_diff = 0;  // evicted rows whose Auto choice differs from mma.sync's
  {
    std::vector<int32_t> a(size_t(kHkv) * L), k(size_t(kHkv) * C);
    check(cudaMemcpy(a.data(), arg, a.size() * 4, cudaMemcpyDeviceToHost), "arg");
    check(cudaMemcpy(k.data(), kept, k.size() * 4, cudaMemcpyDeviceToHost), "kept");
    for (int h = 0; h < kHkv; ++h) {
      std::vector<uint8_t> is_kept(size_t(L), 0);
      for (int c = 0; c < C; ++c) is_kept[size_t(k[size_t(h) * C + c])] = 1;
      for (int e = 0; e < L; ++e)
        arg_diff += !is_kept[size_t(e)] && a[size_t(h) * L + e] != arg_auto[size_t(h) * L + e];
    }
  }
  std::pair<float, float> se_f32{0.f, 0.f};
  if (L <= 131072) se_f32 = first_and_median_ms(1, [&] { search(vlm::cuda::LookMSearch::F32); });
  const double flop = 2.0 * double(L - C) * C * kD * kHkv;
  const float step = sc_mma.second + sel.second + comp.second;
  std::printf("lookm-compact L=%d kept=%d per layer, warm median (first call): scores_ms=%.3f (%.2f) "
              "scores_f32_ms=%.3f (%.2f) scores_rel_diff=%.2e kept_set_diff_vs_f32_scores=%d host_select_ms=%.2f "
              "device_select_ms=%.3f (%.2f) same_as_host=%d merge_compact_ms=%.3f (%.2f) [search_auto_ms=%.3f (%.2f) "
              "%.0f TFLOP/s, rest_ms=%.3f] search_mmasync_ms=%.3f (%.0f TFLOP/s, choices differing from Auto: %d) "
              "search_f32_ms=%.2f step_28_layers_s=%.3f (first calls: %.3f)\n",
              L, C, sc_mma.second, sc_mma.first, sc_f32.second, sc_f32.first, score_diff, set_diff, host_ms,
              sel.second, sel.first, int(same), comp.second, comp.first, se_mma.second, se_mma.first,
              flop / (se_mma.second * 1e-3) / 1e12, comp.second - se_mma.second, se_sync.second,
              flop / (se_sync.second * 1e-3) / 1e12, arg_diff, se_f32.second, 28 * step / 1000.0,
              28 * (sc_mma.first + sel.first + comp.first) / 1000.0);
  std::fflush(stdout);
  cudaFree(arg);
  cudaFree(w);
  for (void* x : {static_cast<void*>(q), static_cast<void*>(scores), static_cast<void*>(scores2), stats, ws,
                  static_cast<void*>(kept)})
    cudaFree(x);
}

}  // namespace

// Arguments: "sink", "lookm" or "compact" for one part only; after "compact", the prompt lengths
// (default 32768 98304 131072).
int main(int argc, char** argv) {
  const std::string part = argc > 1 ? argv[1] : "all";
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  if (part == "sink" || part == "all")
    for (int ctx : {32768, 131072, 524288}) bench_sink(ctx);
  if (part == "lookm" || part == "all") {
    const int full = 131072, kept = full / 5;  // LOOK-M at a 20 % budget keeps hh + recent = 0.2 N
    const double a = decode_ms(8, full), b = decode_ms(8, kept);
    std::printf("lookm seqs=8 ctx=%d full_ms=%.4f ctx_kept=%d kept_ms=%.4f speedup=%.2f\n", full, a, kept, b, a / b);
  }
  if (part == "compact" || part == "all") {
    std::vector<int> lens;
    for (int i = 2; i < argc; ++i) lens.push_back(std::atoi(argv[i]));
    if (lens.empty()) lens = {32768, 98304, 131072};
    for (int L : lens) bench_look_m_compaction(L);
  }
  return 0;
}

// The decode attention's constants and plans (host): one wave's partition (plan_decode), a routed
// sequence's plan on the device (routed_plan), the merged reduce's split limit and the plan a call
// asks for (decode_mode). Part of decode_attention.cu (included by it alone: the definitions sit in
// an unnamed namespace of that translation unit), split from it by phase.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/attention/cuda_attention.h"
#include "kernels/cuda/attention/decode_merge.cuh"
#include "kernels/cuda/core/cuda_check.h"

namespace vlm::cuda {
namespace {

constexpr int kWarps = 4, kThreads = 32 * kWarps, kBN = 64, kRows = 16;

// The plan and the split kernel's merge (mode): v1 reduce_group, v2 reduce_group_staged (both by
// the last CTA of a group, with counters), cluster (v3): decode::cluster_merge (the grid's x is
// one cluster).
constexpr int kModeV1 = 0, kModeV2 = 1, kModeCluster = 2;

// The split kernel's cache (kKv): 16-bit, FP8 converted in shared memory (v1), FP8 converted in
// registers (v2; T = __half), v2's deep-pipeline form (v3: kFp8Stages3 stages, block-table entries
// read a tile ahead), v3 with V's bytes converted by integer ops (v4: pv_tile_fp8_alu).
constexpr int kKv16 = 0, kKvFp8Smem = 1, kKvFp8Reg = 2, kKvFp8Reg3 = 3, kKvFp8Reg4 = 4;
constexpr bool fp8_deep(int kKv) { return kKv == kKvFp8Reg3 || kKv == kKvFp8Reg4; }  // v3, v4
constexpr int kFp8Stages = 4;   // the register form's byte-tile stages (kFp8Stages * 2 * kBN * D bytes)
constexpr int kFp8Stages3 = 6;  // v3's: 5 tiles (80 KiB at D = 128) in flight while one is computed
template <int kKv>
constexpr int fp8_stages() {
  return fp8_deep(kKv) ? kFp8Stages3 : kFp8Stages;
}

// The merged reduce puts a group's whole merge on one SM (G x D columns over its splits), the
// reduce kernel spreads it over num_seqs x H CTAs but costs a launch: the merged one is taken for
// plans of at most this many splits per group (VLM_CUDA_DECODE_MERGED_REDUCE_MAX_SPLITS, a
// measuring knob read once; default 32, where the merge is a few loads a thread).
constexpr int kMergedReduceMaxSplits = 32;
int merged_reduce_max_splits() {
  static const int v = [] {
    const char* e = std::getenv("VLM_CUDA_DECODE_MERGED_REDUCE_MAX_SPLITS");
    return e != nullptr && *e != '\0' ? std::max(0, std::atoi(e)) : kMergedReduceMaxSplits;
  }();
  return v;
}

struct DecodePlan {
  int partition = 0;   // keys per split
  int max_splits = 0;  // splits of the longest sequence
};

// One wave: splits per (sequence, KV head) = resident CTA slots / pairs (at least 1), so the grid
// fits the GPU at once (a second, partial wave would idle most SMs at the end); partitions of at
// least 128 keys. blocks_per_sm: the split kernel's occupancy (at most kMaxBlocksPerSm).
// v2 and v3 (DecodeKernel::kV2, kV3): partitions of at least 64 keys; plans that would have more
// splits than the merge takes (v2: the merged reduce's limit, v3: a cluster's 16 CTAs) get longer
// partitions, up to kShortMaxPartition keys, so that the split kernel still merges them (a
// reduce launch costs more than a few more tiles a CTA).
constexpr int kMaxBlocksPerSm = 4, kShortMaxPartition = 256;
DecodePlan plan_decode(int num_seqs, int num_kv_heads, int max_context_len, int blocks_per_sm, int mode) {
  static const int sms = [] {
    int dev = 0, n = 0;
    VLM_CUDA_CHECK(cudaGetDevice(&dev));
    VLM_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    return n;
  }();
  const int pairs = std::max(1, num_seqs * num_kv_heads);
  const int want = std::max(1, sms * std::min(blocks_per_sm, kMaxBlocksPerSm) / pairs);
  // The shortest partition (a multiple of kBN, at least 128 keys for v1, 64 for v2):
  // VLM_CUDA_DECODE_MIN_PARTITION, a measuring knob (bench_cuda_attention decode); read once.
  static const int min_partition_knob = [] {
    const char* e = std::getenv("VLM_CUDA_DECODE_MIN_PARTITION");
    const int v = e ? std::atoi(e) : 0;
    return (std::max(0, v) + kBN - 1) / kBN * kBN;
  }();
  const int min_partition = std::max(mode == kModeV1 ? 128 : kBN, min_partition_knob);
  const int ctx = std::max(1, max_context_len);
  int partition = (ctx + want - 1) / want;
  partition = std::max(min_partition, (partition + kBN - 1) / kBN * kBN);
  const int cap = mode == kModeV2 ? merged_reduce_max_splits() : mode == kModeCluster ? decode::kMaxCluster : 0;
  if (cap > 0 && (ctx + partition - 1) / partition > cap) {
    const int fit = ((ctx + cap - 1) / cap + kBN - 1) / kBN * kBN;  // cap splits
    if (fit <= kShortMaxPartition) partition = std::max(partition, fit);
  }
  return {partition, (ctx + partition - 1) / partition};
}

// A routed sequence's plan: `active` groups not skipped (in group order), each split into
// `per` CTAs' worth of `partition` keys (a multiple of kBN, at least 128).
struct RoutedPlan {
  int active = 0, per = 0, partition = 0;
};
__device__ __forceinline__ RoutedPlan routed_plan(const uint8_t* skip /*[Hkv]*/, int Hkv, int slots, int ctx) {
  RoutedPlan p;
  for (int g = 0; g < Hkv; ++g) p.active += skip[g] == 0;
  if (p.active == 0) return p;
  p.per = slots / p.active;
  const int len = (ctx + p.per - 1) / p.per;
  p.partition = max(128, (len + kBN - 1) / kBN * kBN);
  return p;
}

// The plan a call asks for (launch_decode may fall back from v3 to v2): kAuto is v3 for a step of
// one sequence and v1 for more, unless VLM_CUDA_DECODE_KERNEL=v1|v2|v3 names one for all (read
// once); routed launches always take v1. Measured on H200s (session 18, calls C-D, bench/RESULTS.md),
// decode ms a step, v1 / v3: one sequence -- Qwen2-VL-72B shape at TP=2, 1K 21.02-21.12 / 20.58;
// Qwen3-30B-A3B 1K 3.82 (call B) / 3.60; Qwen3-8B 1K 4.668-4.689 / 4.667-4.675; Qwen2-VL-7B 4K 4.203 /
// 4.246, 32K 4.794 / 4.746; more sequences -- 7B 16 x 4K 6.210 / 6.842, Qwen3-8B 64 x 1K 8.352-8.399 /
// 8.339-8.416.
int decode_mode(DecodeKernel kernel, bool routed, int num_seqs) {
  static const DecodeKernel env_choice = [] {
    const char* e = std::getenv("VLM_CUDA_DECODE_KERNEL");
    if (e != nullptr && std::strcmp(e, "v1") == 0) return DecodeKernel::kV1;
    if (e != nullptr && std::strcmp(e, "v2") == 0) return DecodeKernel::kV2;
    if (e != nullptr && std::strcmp(e, "v3") == 0) return DecodeKernel::kV3;
    return DecodeKernel::kAuto;
  }();
  if (routed) return kModeV1;
  if (kernel == DecodeKernel::kAuto) kernel = env_choice;
  if (kernel == DecodeKernel::kAuto) kernel = num_seqs == 1 ? DecodeKernel::kV3 : DecodeKernel::kV1;
  return kernel == DecodeKernel::kV1 ? kModeV1 : kernel == DecodeKernel::kV3 ? kModeCluster : kModeV2;
}

}  // namespace
}  // namespace vlm::cuda

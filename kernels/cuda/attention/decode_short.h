// Short-context decode in one launch (issues 40/41): the q/k head norm, RoPE, the new token's K/V
// write into the paged cache and decode attention over the cache, fused. For steps of a few
// sequences (<= kDecodeShortMaxSeqs) with short contexts (<= kDecodeShortMaxContext) on sm_90+,
// a 16-bit cache of the activations' dtype and D 64/128: what rope_split_q_kv_write then
// paged_decode_attention (v3 plan) compute, with one kernel instead of two.
//
// Plan: grid (n, Hkv, num_seqs) in thread-block clusters of n CTAs (one per (sequence, KV head)),
// n = min(ceil(max_context_len / 64), VLM_CUDA_DECODE_SHORT_SPLITS (default 16)), partitions of
// ceil(max_context_len / n) keys rounded up to 64; each CTA streams its partition in 64-key tiles
// (three stages: two tiles in flight while one computes; 100 KiB of shared memory at D = 128, two
// CTAs an SM) and the cluster merges its n partials through distributed shared memory
// (decode::cluster_merge, as v3). The first tile's block-table entries are loaded together with
// the context length (the split's keys do not depend on it), so its copies start one round trip
// earlier than the split kernel's. While its first tile is in flight every CTA computes
// the q rows of its group (norm + RoPE from the qkv row, the same bits as rope_split_q_kv_write) and
// the new key and value; the new token (position context_lens[s] - 1) is taken from those registers
// (through shared memory) instead of being read back from the cache, so no CTA waits for the
// write. The CTA whose partition holds the new token writes its K/V rows to slot_mapping[s] (the
// bytes rope_split_q_kv_write writes); split 0 of each group writes its q rows to `q` (readers after
// the step: the same q as the two-kernel path). A slot of -1 writes nothing and the new token's
// K/V are then read from the cache (as the two-kernel path does).
//
// Switch: VLM_CUDA_DECODE_SHORT=0 turns it off (read once; default on, proposed: one launch and
// its dependency gap saved a layer; the lead's H200 rows decide), CudaDecoder routes through the
// existing two kernels then. Contract otherwise as cuda_attention.h (device pointers, no host sync,
// no allocation: capturable).
#pragma once

#include <cstdint>

#include "kernels/cuda/attention/cuda_attention.h"

namespace vlm::cuda {

constexpr int kDecodeShortMaxSeqs = 4;  // what the kernel takes (CudaDecoder hands it one: cuda_decoder_attention.cpp)
constexpr int kDecodeShortMaxContext = 8192;

// VLM_CUDA_DECODE_SHORT (unset or 1: on, 0: off), read once.
bool decode_short_env();

// Whether rope_kv_decode_attention takes this step: sm_90+ device, act BF16/F16 with kv.dtype ==
// act, D 64/128, H % Hkv == 0 and H / Hkv <= 16, block size a power of two, the RoPE table's R as
// rope_kv_write_supported wants, norm (q/k norm present) only where rope_kv_write_norm_supported,
// 1 <= num_seqs <= kDecodeShortMaxSeqs, max_context_len <= kDecodeShortMaxContext. Does not read
// the env switch (callers do).
bool decode_short_supported(const PagedKVLayer& kv, DType act, int num_heads, int64_t R, bool norm, int num_seqs,
                            int max_context_len);

// One decode row per sequence: qkv [S, (H + 2 Hkv) D] (act), table [S, R] (cos | sin),
// slot_mapping [S] (-1: not written), batch (context_lens counts this step's token; group_skip must
// be null; cu_seqlens_q not read), q [S, H, D] (written: post-norm, post-RoPE), out [S, H, D].
// Needs decode_short_supported (InternalError otherwise).
void rope_kv_decode_attention(const void* qkv /*[S,(H+2Hkv)D]*/, int num_heads, const float* table /*[S,R]*/,
                              int64_t R, void* q /*[S,H,D]*/, const PagedKVLayer& kv,
                              const int32_t* slot_mapping /*[S]*/, const CudaAttentionBatch& batch, float scale,
                              void* out /*[S,H,D]*/, DType act, cudaStream_t stream, const HeadNorm& norm = {});

}  // namespace vlm::cuda

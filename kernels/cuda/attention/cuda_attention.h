// Attention on the GPU over the paged KV cache (CUDA). The same layout and block ids as the CPU
// (kernels/attention/paged_kv.h): per layer k, v [num_blocks, Hkv, B, D]; token slot s lives in
// block s / B at offset s % B. Only the pointers differ: here every array is in device memory.
//
// Contract common to every function below:
//  - All pointers are device pointers (PagedKVLayer::k/v too); host-side ints are marked "host".
//  - Work is enqueued on `stream`; nothing synchronizes with the host and nothing allocates.
//    Launch errors are raised as InternalError (VLM_CHECK on cudaGetLastError()).
//    rope_split_q_kv_write and paged_decode_attention's bf16/f16 kernels launch with programmatic
//    dependent launch inside an active PdlScope (kernels/cuda/core/pdl.h: they wait for the
//    kernel before them before touching memory; the same results).
//  - Activations (q, k, v, out) are F32, BF16 or F16 (`act`); the cache dtype is kv.dtype (F32,
//    BF16, F16 or F8_E4M3); arithmetic is f32 (accumulators, softmax), tensor-core inputs are bf16/f16.
//  - F8_E4M3 cache (--kv-cache-dtype fp8): kv.k_scale/v_scale [Hkv] f32 device pointers must be set
//    (InternalError otherwise); an element x of head h is stored as e4m3(x * (1 / scale[h])),
//    rounded to nearest even and saturated to +-448, and read as its value times scale[h]
//    (paged_kv.h). paged_kv_write, rope_split_q_kv_write, paged_prefill_attention (the mma.sync
//    kernel, never wgmma), paged_decode_attention and the naive references read/write it. The tiled kernels
//    compute on the stored values exactly (E4M3 converts to bf16 exactly, q is rounded to bf16):
//    K's scale multiplies `scale`, V's the output. SinkRouter reads it too (cuda_sink_router.h);
//    cuDNN, block-sparse prefill and LOOK-M do not: the engine refuses those combinations at start.
//  - The batch (CudaAttentionBatch) means what AttentionBatch means on the CPU
//    (kernels/attention/paged_attention.h): sequence s owns query rows [cu_seqlens_q[s],
//    cu_seqlens_q[s+1]) and its cache holds context_lens[s] tokens, this step's included (written
//    with paged_kv_write or rope_split_q_kv_write first); query row i of q_len sits at position
//    context_lens[s] - q_len + i and attends keys [0, that position] (causal; a chunk sees the
//    earlier cached context).
//    Query head h reads KV head h / (H / Hkv) (GQA). scale multiplies q·k.
//
// Kernel choice (no flags): prefill attention uses tensor cores when kv.dtype is BF16/F16: on
// Hopper with D = 128 wgmma (128 query rows per CTA, a producer warpgroup and two consumer
// warpgroups in pingpong, 128-key tiles), else
// mma.sync m16n8k16 (FlashAttention-2 style: 128 query rows per CTA, 32 per warp, K/V tiles
// streamed through shared memory, online softmax) (q is rounded to kv.dtype on load); when kv.dtype is F32 it
// runs the same tiling with f32 FMA (no TF32): the exact path. Decode attention is split along the
// context (FlashDecoding): one CTA per (sequence, KV head, context split) computes the G = H / Hkv
// query heads of the group from one load of K/V, then a reduce kernel merges the splits.
// cuDNN's fused flash attention (cudnn_attention.h, not declared here) is the other dense prefill path:
// CudaDecoder takes it for first chunks (model/layers/cuda/cuda_cudnn_prefill.h).
// Each optimized kernel has a naive reference beside it (*_naive: one thread block per query row
// and head, plain two-pass softmax), used by the tests.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/attention/paged_attention.h"
#include "kernels/attention/paged_kv.h"
#include "kernels/core/dtype.h"

// The CUDA runtime's own spelling, so this header needs no CUDA include path.
typedef struct CUstream_st* cudaStream_t;

namespace vlm::cuda {

// AttentionBatch with device pointers, plus the host-side maxima that size the grids.
struct CudaAttentionBatch : AttentionBatch {
  // cu_seqlens_q [num_seqs+1], context_lens [num_seqs], block_tables [num_seqs, max_blocks_per_seq]:
  // device pointers (inherited fields).
  int max_q_len = 0;        // host: max over s of q_len(s)
  int max_context_len = 0;  // host: max over s of context_lens[s]
  // SinkRouter (decode only; kernels/cuda/sink_router): group_skip [num_seqs, Hkv] device flags,
  // 1 = sink group: its G query heads get group_surrogate[s, g, :] (f32 [num_seqs, Hkv, D]; null:
  // zeros) and its K/V are never read. Read by the device, so the launch shape does not depend
  // on them. Null: no group is skipped.
  const uint8_t* group_skip = nullptr;
  const float* group_surrogate = nullptr;
};

// ---- paged KV write ----
// Writes k[T, Hkv, D], v[T, Hkv, D] (dtype act) to the slots slot_mapping[T] of the layer,
// converted to kv.dtype (round to nearest even). A slot of -1 skips that token.
// Preconditions: slots < kv.num_blocks * kv.block_size; D % 8 == 0.
void paged_kv_write(const PagedKVLayer& kv, const void* k /*[T,Hkv,D]*/, const void* v /*[T,Hkv,D]*/,
                    DType act, const int32_t* slot_mapping /*[T]*/, int64_t T, cudaStream_t stream);
void paged_kv_write_naive(const PagedKVLayer& kv, const void* k /*[T,Hkv,D]*/,
                          const void* v /*[T,Hkv,D]*/, DType act, const int32_t* slot_mapping /*[T]*/,
                          int64_t T, cudaStream_t stream);
// The RoPE split of the fused projection (cuda::rope_split_qkv, kernels/cuda/ops/ops_cuda.h)
// fused with paged_kv_write: q [T, H, D] as rope_split_qkv writes it, the rotated k and the v
// rows written straight into their slots of the cache (slot -1: skipped), the same bytes as
// rope_split_qkv then paged_kv_write, in one pass over qkv. qkv [T, (H + 2 Hkv) D] (act);
// table [T, R] (cos | sin). Needs rope_kv_write_supported (act BF16/F16 and a cache of act's
// dtype or F8_E4M3; else call the two).
// With `norm` (q_w non-null: Qwen3's q/k RMSNorm, weights [D] f32 each) the q and k heads are
// normalized first, the same bits as cuda::head_rms_norm in place then this call without it;
// needs head_norm_x8_supported(D) (D / 8 a power of two <= 32).
struct HeadNorm {
  const float* q_w = nullptr;
  const float* k_w = nullptr;
  float eps = 0.0f;
};
bool rope_kv_write_supported(const PagedKVLayer& kv, DType act, int64_t R);
bool rope_kv_write_norm_supported(int64_t head_dim);  // head_dim / 8 a power of two <= 32
void rope_split_q_kv_write(const void* qkv /*[T,(H+2Hkv)D]*/, int64_t T, int64_t H, const float* table /*[T,R]*/,
                           int64_t R, void* q /*[T,H,D]*/, const PagedKVLayer& kv, const int32_t* slot_mapping /*[T]*/,
                           DType act, cudaStream_t stream, const HeadNorm& norm = {});

// ---- prefill (any q_len; mixed prefill chunks and decode rows allowed) ----
// q[T, H, D] and out[T, H, D] in dtype act. D in {64, 128}; H % Hkv == 0;
// kv.block_size a power of two.
// Kernel: kAuto takes kWgmmaPp (prefill_attention_sm90.cu, the fastest of the Hopper kernels as
// measured in bench/RESULTS.md) on an sm_90 GPU when D = 128 and the cache is BF16/F16, else the
// mma.sync kernel (F32 cache: the f32 kernel).
// kMmaSync, kWgmma (all threads load and compute), kWgmmaWs (a producer warpgroup loads, two
// consumer warpgroups compute) and kWgmmaPp (the same with the consumers in pingpong) name one
// (the wgmma ones fall back to mma.sync where unsupported); tests compare them.
// VLM_CUDA_PREFILL_KERNEL=mma|wgmma|ws|pp makes kAuto take that one (benchmarks).
enum class PrefillKernel { kAuto, kMmaSync, kWgmma, kWgmmaWs, kWgmmaPp };
void paged_prefill_attention(const void* q /*[T,H,D]*/, DType act, int num_heads, const PagedKVLayer& kv,
                             const CudaAttentionBatch& batch, float scale, void* out /*[T,H,D]*/,
                             cudaStream_t stream, PrefillKernel kernel = PrefillKernel::kAuto);

// ---- decode (q_len == 1 for every sequence; cu_seqlens_q is not read) ----
// q[num_seqs, H, D] and out[num_seqs, H, D] in dtype act. D in {64, 128}; H % Hkv == 0;
// H / Hkv <= 16; kv.block_size a power of two. workspace: device memory of
// paged_decode_workspace_bytes(...) bytes (partial outputs and softmax statistics of the splits),
// reusable across layers (calls on one stream). counters: null, or device int32
// [num_seqs, Hkv], all 0 before the first call (every call leaves them 0; calls sharing them run on
// one stream): then the split kernel's last CTA of each (sequence, KV head) merges the splits
// itself, no reduce launch (capturable in a CUDA graph; the same arithmetic up to the order of
// the softmax sums' f32 additions) for plans of at most 32 splits per KV head
// (VLM_CUDA_DECODE_MERGED_REDUCE_MAX_SPLITS), else -- or where its weights do not fit shared
// memory -- the reduce kernel runs.
// Plan (decode_attention.cu): kV1 is session 15's (partitions of at least 128 keys, the last CTA
// of a group merges with loads through L2); kV2 takes partitions of at least 64 keys, prefetches
// the block table and stages the last CTA's merge through shared memory; kV3 is v2's plan (at
// most 16 splits a group where partitions of up to 256 keys allow) launched in thread-block
// clusters, one per (sequence, KV head), merged through distributed shared memory with no
// workspace, counters or reduce launch (sm_90+; plans of 2..16 splits where such a cluster fits,
// else v2). kAuto takes kV3 for a step of one sequence and kV1 for more (session 18's measurements in
// decode_plan.cuh), or what VLM_CUDA_DECODE_KERNEL=v1|v2|v3 names (read once). All give the same result up to the f32 order of the split sums; SinkRouter's
// routed launches (group_skip set) always take kV1. VLM_CUDA_DECODE_MIN_PARTITION=N raises every
// plan's shortest partition.
enum class DecodeKernel { kAuto, kV1, kV2, kV3 };

// An F8_E4M3 cache's decode form: 1 (v1: byte tiles converted to bf16 in shared memory, bf16 mma),
// 2 (v2: K/V fragments converted to f16 in registers from swizzled byte tiles, f16
// mma, four stages) or 3 (v3, the default: v2 with six stages, 5 tiles in flight while one computes, and each
// tile's block-table entries read a tile ahead) or 4 (v4: v3 with V's fragments converted by integer
// ops, K's by the conversion unit); VLM_CUDA_FP8_KV_KERNEL=v1|v2|v3|v4 is read once. Sets
// it for later calls (tests and benches compare the forms in one process; other values only query)
// and returns the form before.
int set_fp8_kv_decode_form(int form);
size_t paged_decode_workspace_bytes(int num_seqs, int num_heads, int num_kv_heads, int head_dim,
                                    int max_context_len);
void paged_decode_attention(const void* q /*[S,H,D]*/, DType act, int num_heads, const PagedKVLayer& kv,
                            const CudaAttentionBatch& batch, float scale, void* out /*[S,H,D]*/,
                            void* workspace, cudaStream_t stream, int32_t* counters /*[S,Hkv] or null*/ = nullptr,
                            DecodeKernel kernel = DecodeKernel::kAuto);

// ---- naive reference for both (any D <= 256, any q_len) ----
// One thread block per (query row, head); scores of the row in shared memory (context up to
// 12000 tokens), max, sum of exp, then P·V; f32 throughout.
void paged_attention_naive(const void* q /*[T,H,D]*/, DType act, int num_heads, const PagedKVLayer& kv,
                           const CudaAttentionBatch& batch, float scale, void* out /*[T,H,D]*/,
                           cudaStream_t stream);

}  // namespace vlm::cuda

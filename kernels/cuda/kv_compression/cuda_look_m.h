// LOOK-M at the end of prefill on the GPU (paper §3, ALGORITHMS.md §7; the CPU's
// kernels/kv_compression): importance scores as column sums of prompt softmax attention, and the
// merge + compaction of one sequence's layer given each kv head's kept positions. The kept sets
// are chosen on the device too (look_m_select_kept: the CPU's ranking exactly), so the end of a prompt needs
// no host round trip. Contract as kernels/cuda/attention/cuda_attention.h: device pointers, work on
// `stream`, no sync; the scratch buffers are the caller's.
// F8_E4M3 caches (--kv-cache-dtype fp8, paged_kv.h's convention; k_scale/v_scale set): every pass
// reads the dequantized values (byte * the head's static scale) on the f32 CUDA-core kernels (no
// tensor-core FP8 path yet); the compaction merges in f32 and re-quantizes each written entry with
// the same static per-head scale (paged_kv_write's rounding), so an entry kept without merging keeps
// its byte. 16-bit and f32 caches run exactly as before (the FP8 branches are never taken).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/attention/paged_kv.h"
#include "kernels/core/dtype.h"

typedef struct CUstream_st* cudaStream_t;

namespace vlm {
// kernels/kv_compression/look_m_params.h (not included: its C++20 parts do not compile in the .cu's
// C++17; the kernels switch on the values None 0, Average 1, Pivot 2, Weighted 3, which
// tests/kernels/cuda/test_cuda_look_m.cpp pins).
enum class KVMerge : uint8_t;
}  // namespace vlm

namespace vlm::cuda {

// Which kernels serve a pass: Auto, tensor cores where they apply (16-bit caches, D 64 / 128; the
// score passes also need act == the cache's dtype; the search on an sm_90 GPU with D 128: wgmma,
// else mma.sync); MmaSync, the same but the search always by mma.sync (the wgmma kernel's
// comparison); F32, the CUDA-core f32 kernels everywhere (the naive reference the tests compare
// the tensor-core kernels with).
enum class LookMSearch : uint8_t { Auto, F32, MmaSync };

// accumulate_attention_scores (kernels/kv_compression/attention_scores.h) on the device: q[R, H, D]
// (dtype act) are consecutive query rows of one sequence at cache positions first_pos + r, keys
// read through block_table; scores[h * stride + j] += Σ_{r, heads of group h} softmax_r(j) for
// j < first_pos + R. Per block of 64 rows: every key chunk's (128 keys) max and sum of exp per row
// and head, merged into each row's (max, sum), then the column sums. F32: one thread per key with
// the key in registers, f32, rows in order. Auto with bf16/f16 act == cache dtype and D 64 / 128:
// the same passes with the logits on tensor cores (look_m_scores_mma.cuh; exact 16-bit products,
// only the f32 summation order differs). row_stats: look_m_row_stats_bytes(R, H, first_pos + R)
// bytes. Preconditions: H % Hkv == 0; H / Hkv <= 16; D <= 256.
size_t look_m_row_stats_bytes(int32_t R, int num_heads, int32_t num_keys);
void look_m_accumulate_scores(const void* q /*[R,H,D]*/, DType act, int32_t R, int num_heads, const PagedKVLayer& kv,
                              const int32_t* block_table, int32_t first_pos, float scale, void* row_stats,
                              float* scores /*[Hkv, stride]*/, int64_t stride, cudaStream_t stream,
                              LookMSearch how = LookMSearch::Auto);

// select_kept_tokens (kernels/kv_compression/token_selection.h) on the device for `segments`
// score rows (scores[i * stride + j], j < L; e.g. every layer's and kv head's of one sequence):
// kept[i, 0 .. N + M) = the top N candidates of [0, L - M) by (prior, score, lower position) in
// ascending positions, then the recent window L - M .. L - 1; exactly the CPU's set (ties and -0
// as the CPU). Prior: is_text[j] (device, [L]) when text_prior, else j < num_sink_tokens.
// Preconditions: M + N < L (the caller keeps everything otherwise); finite scores.
void look_m_select_kept(const float* scores, int64_t stride, int segments, const uint8_t* is_text /*[L]*/, int32_t L,
                        int32_t recent, int32_t important, bool text_prior, int32_t num_sink_tokens,
                        int32_t* kept /*[segments, N+M]*/, cudaStream_t stream);

// compact_sequence_kv's merge and write-back for one sequence and layer of L cached tokens:
// kept[h, c] (ascending positions, C per head) from select_kept_tokens; every evicted position is
// folded into its most similar kept key (cosine on keys, first maximum; merge rule p.merge, as
// merge_kept_kv), and the C merged entries are written, in order, to slots [0, C) of each head.
// workspace: look_m_compact_workspace_bytes(L, C, Hkv, D) bytes.
//
// The similarity search (LookMSearch::Auto): bf16/f16 caches with D 64 or 128 on tensor cores
// (look_m_search_mma.cuh: the evicted rows listed and the kept keys gathered into one contiguous
// copy first, then the dot products as GEMMs with a fused first-maximum arg-max: wgmma over 128
// evicted rows x 128 kept keys per step on an sm_90 GPU with D 128, else mma.sync over 256 x 64);
// 16-bit products are exact, only the f32 summation order (and an ulp of the cosine's scaling)
// differs from the f32 path, so a choice can differ from the CPU's only where two kept keys'
// cosines agree to f32 rounding; tests/kernels/cuda/test_cuda_look_m.cpp pins equality on its
// shapes); f32 caches and other D: the f32 CUDA-core kernels (LookMSearch::F32, the naive
// reference the tests compare with).
size_t look_m_compact_workspace_bytes(int32_t L, int32_t C, int num_kv_heads, int head_dim);
void look_m_compact(const PagedKVLayer& kv, const int32_t* block_table, int32_t L, const int32_t* kept /*[Hkv,C]*/,
                    int32_t C, KVMerge merge, void* workspace, cudaStream_t stream);

// The search alone (tests, bench): arg[h * L + e] = the kept index (into kept[h, :]) of evicted
// position e's most similar kept key, w[h * L + e] its cosine; entries of kept positions are
// unspecified. workspace as look_m_compact's.
void look_m_nearest_kept(const PagedKVLayer& kv, const int32_t* block_table, int32_t L, const int32_t* kept /*[Hkv,C]*/,
                         int32_t C, LookMSearch how, void* workspace, int32_t* arg /*[Hkv,L]*/, float* w /*[Hkv,L]*/,
                         cudaStream_t stream);

}  // namespace vlm::cuda

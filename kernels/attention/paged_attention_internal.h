// Internals of paged_attention shared by its driver, its tile kernels and the tests; not part of
// the kernel API (include kernels/attention/paged_attention.h instead).
//
// The driver works on tiles: M query vectors (a few query rows x the G query heads of one kv
// head) against key tiles of at most kKeyTile keys of that kv head. All tile buffers are f32,
// row-major, with the head dim padded to Dp = round_up(D, 16) (zero padding), so that kernels
// see whole 16-float vectors only. Scores live in the log2 domain: q is pre-multiplied by
// scale * log2(e) and probabilities are exp2(s - m).
#pragma once

#include <cstdint>

#include "kernels/attention/paged_attention.h"

namespace vlm::attn {

constexpr int kKeyTile = 32;  // keys per key tile (KT)
constexpr int kDimAlign = 16;

inline int padded_head_dim(int D) { return (D + kDimAlign - 1) / kDimAlign * kDimAlign; }

// A row's running max may lag its true max by up to this much (log2 units): the accumulator is
// only rescaled when a new max exceeds the reference by more, so p = exp2(s - m) <= 2^8.
constexpr float kRescaleThreshold = 8.0f;
// A row's running sum is kept as kSumLanes partial sums (its total is the sum); implementations
// may use any of the lanes.
constexpr int kSumLanes = 16;

// Cache lines that a later key tile will read, requested (software prefetch into L2) a few at a
// time from inside a tile's loops, between its arithmetic: a burst of a whole tile's lines at
// once fills the core's miss buffers and stalls the arithmetic behind it until the lines arrive
// (measured: 4K decode rows from memory ~20 % faster spread than in one burst per tile).
// line[next, n) are still to be requested, in order.
struct PrefetchLines {
  static constexpr int kCapacity = 1024;
  const char* line[kCapacity];
  int n = 0, next = 0;

  void issue(int count) {
    for (; count > 0 && next < n; --count) __builtin_prefetch(line[next++], 0, 2);
  }
  void issue_all() { issue(n - next); }
};

// The four steps of one key tile; one implementation per instruction set. The f32 tiles (generic,
// avx512) hold q, kt and the V rows as f32 as described below; the bf16 tiles (avx512_bf16,
// attention_tile_bf16.cpp) hold q, kt and V in bf16 in their own layouts inside the same buffers
// (see there). Scores, probabilities and the state (m, l, acc) are f32 in both.
struct TileOps {
  const char* name;
  // Null, or rewrites the pre-scaled query vectors qt[M, Dp] (f32) in place into this
  // implementation's query format, once per key range before the first tile.
  void (*prepare_q)(float* qt /*[M,Dp]*/, int M, int Dp);
  // Keys [k0, k0 + n) of kv head kvh (1 <= n <= kKeyTile), read through the sequence's block
  // table row: K transposed into kt[Dp, KT] (f32; rows d >= D zero, columns >= n unspecified).
  // V rows as pointers vrows[j] (j < n) to Dp f32 values whose padding d >= D is zero: either
  // rows of vbuf (converted there, vbuf's padding must already be zero) or the cache itself.
  void (*load_kv)(const PagedKVLayer& kv, const int32_t* block_row, int kvh, int k0, int n,
                  int Dp, float* kt /*[Dp,KT]*/, float* vbuf /*[KT,Dp]*/,
                  const float** vrows /*[KT]*/);
  // s[m, j] = q[m, :] . kt[:, j] for m < M and j < n (columns >= n unspecified). pf (or null):
  // lines to request meanwhile; an implementation may issue some of them (PrefetchLines::issue),
  // the caller issues the rest.
  void (*scores)(const float* q /*[M,Dp]*/, int M, int Dp, const float* kt /*[Dp,KT]*/, int n,
                 float* s /*[M,KT]*/, PrefetchLines* pf);
  // Online softmax step. Row m has nvalid[m] valid keys (the rest are masked). For a row with
  // nvalid[m] > 0 whose valid max mx exceeds m_run[m] + kRescaleThreshold (always when m_run is
  // -inf): m_run = mx, acc row and l_run row scaled by exp2(old - new). Then the s row becomes
  // p = exp2(s - m_run) (0 for masked keys) and the l_run row's lanes gain sum p. Rows with
  // nvalid[m] == 0 get p = 0 and keep their state. m_run starts at -inf, l_run and acc at 0.
  void (*softmax)(float* s /*[M,KT]*/, const int* nvalid /*[M]*/, int M, int Dp,
                  float* m_run /*[M]*/, float* l_run /*[M,kSumLanes]*/, float* acc /*[M,Dp]*/);
  // acc[m, :] += sum_{j < nvalid[m]} p[m, j] * vrows[j][:]  (p is 0 beyond nvalid[m]). pf: as
  // for scores.
  void (*pv)(const float* p /*[M,KT]*/, const int* nvalid /*[M]*/, int M, int Dp,
             const float* const* vrows /*[KT]*/, float* acc /*[M,Dp]*/, PrefetchLines* pf);
};

const TileOps& tile_ops_generic();
// nullptr when the CPU lacks AVX-512 (or the build has no AVX-512 code).
const TileOps* tile_ops_avx512();
// The best f32 implementation for this CPU (chosen once).
const TileOps& tile_ops_best();
// The bf16 dot-product tiles (vdpbf16ps: q and p rounded to bf16, K and V read as stored, f32
// sums), or nullptr when the CPU lacks AVX512-BF16 (or AVX-512 is switched off). They take a
// BF16 cache with head_dim a multiple of 32 only (bf16_tiles_fit).
const TileOps* tile_ops_avx512_bf16();
bool bf16_tiles_fit(const PagedKVLayer& kv);
// What paged_attention runs for this cache: the bf16 tiles when bf16_attention() is on, they
// exist and fit the cache; else tile_ops_best().
const TileOps& tile_ops_for(const PagedKVLayer& kv);

// What every CPU attention driver (paged, block-sparse) hands its work items.
struct AttentionCall {
  const TileOps& ops;
  const float* q;  // [T, H, D]
  float* out;      // [T, H, D]
  const PagedKVLayer& kv;
  const AttentionBatch& batch;
  int H, G, D, Dp;  // query heads, group size H / Hkv, head dim, padded head dim
  float qscale;     // scale * log2(e): scores in the log2 domain
};

// Throws InternalError unless the arguments meet paged_attention's preconditions.
void check_attention_args(const float* q, int num_heads, const PagedKVLayer& kv,
                          const AttentionBatch& batch, const float* out);

// paged_attention with an explicit tile implementation (tests run every one).
void paged_attention_with(const TileOps& ops, const float* q /*[T,H,D]*/, int num_heads,
                          const PagedKVLayer& kv, const AttentionBatch& batch, float scale,
                          float* out /*[T,H,D]*/);

}  // namespace vlm::attn

// Tensor-core tile primitives for the attention kernels (sm_80+ instructions, run on sm_90):
// mma.sync m16n8k16 with f32 accumulators, ldmatrix from XOR-swizzled shared memory, cp.async
// copies of paged K/V rows, and the fragment bookkeeping of an online softmax.
//
// Fragment layouts (PTX ISA, mma.m16n8k16, lane = 4 g + t):
//   A 16x16: a0 (row g, cols 2t..2t+1), a1 (row g+8, same), a2 (row g, cols 2t+8..), a3 (row g+8, ..)
//   B 16x8:  b0 (k 2t..2t+1, col g), b1 (k 2t+8.., col g)
//   C 16x8:  c0,c1 (row g, cols 2t..2t+1), c2,c3 (row g+8, same)
// So the C fragments of two adjacent 8-key tiles are the A fragment of a 16-key step (P·V).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/attention/cuda_attention_common.cuh"

namespace vlm::cuda::tile {

// The CTA shape of the FlashAttention-2-style mma.sync kernels (prefill_attention.cu,
// varlen_attention.cu): 4 warps of two 16-row slabs each, 128 query rows.
namespace fa2 {
constexpr int kWarps = 4;
constexpr int kMT = 2;  // 16-row slabs per warp
constexpr int kWarpRows = 16 * kMT;
constexpr int kBM = kWarpRows * kWarps;  // query rows per CTA
constexpr int kThreads = 32 * kWarps;
}  // namespace fa2

// Shared-memory tiles are [rows][D] 16-bit elements; the 16-byte chunk c of row r is stored at
// chunk c ^ (r & 7), so the 8 row addresses of an ldmatrix fall in distinct banks.
template <int D>
__device__ __forceinline__ int swz(int row, int col) {
  return row * D + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
}

// The swizzled layout as a type (the Lay parameter of qk_tile_smem / pv_tile; other layouts:
// kernels/cuda/attention/varlen_attention.cu).
template <int D>
struct SwizzledRows {
  static constexpr int kLD = D;
  __device__ static int at(int row, int col) { return swz<D>(row, col); }
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

template <class T> struct MmaType;
template <> struct MmaType<__nv_bfloat16> { static constexpr bool bf16 = true; };
template <> struct MmaType<__half> { static constexpr bool bf16 = false; };

// c += a * b (16x8x16, f32 accumulate).
template <class T>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (MmaType<T>::bf16) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two f32 -> one register of two 16-bit values (x in the low half).
template <class T>
__device__ __forceinline__ uint32_t pack2(float x, float y) {
  if constexpr (MmaType<T>::bf16) {
    __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(x, y);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// 16-byte async copy global -> shared; src_bytes = 0 zero-fills the destination.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Loads keys [key0, key0 + ROWS) of KV head h (K and V) from the paged cache into swizzled
// shared tiles sk, sv [ROWS][D] with cp.async; keys at or beyond key_end are zero-filled (so a
// masked P of 0 never meets garbage V). NT threads share the work. kv.block_size must be a power
// of two. Lay: the tiles' layout (Lay::at(row, col): element offset of a 16-byte chunk's first
// element); UNROLL: the copy loop's unroll. T: the cache's element (16-bit, or uint8_t for an
// F8_E4M3 cache's byte tiles, fp8_kv_tile.cuh); one 16-byte copy moves 16 / sizeof(T) elements.
template <int ROWS, int D, int NT, class T, class Lay = SwizzledRows<D>, int UNROLL = 2>
__device__ __forceinline__ void load_kv_tile(const KVView& kv, const int32_t* table, int h, int key0, int key_end,
                                             T* sk, T* sv, int tid) {
  constexpr int kE = 16 / int(sizeof(T));
  constexpr int kChunks = D / kE;
  const T* kbase = static_cast<const T*>(kv.k);
  const T* vbase = static_cast<const T*>(kv.v);
#pragma unroll UNROLL
  for (int i = tid; i < ROWS * kChunks; i += NT) {
    const int r = i / kChunks, c = i % kChunks;
    const int key = key0 + r;
    int64_t off = 0;
    int bytes = 0;
    if (key < key_end) {
      off = kv.token_offset(table, h, key) + c * kE;
      bytes = 16;
    }
    const int s = Lay::at(r, c * kE);
    cp_async16(sk + s, kbase + off, bytes);
    cp_async16(sv + s, vbase + off, bytes);
  }
}

// S[16 x 8*NK] += Q[16 x D] K^T for one warp: qf holds Q's A fragments (D/16 steps), sk the
// swizzled K tile whose rows key_base.. are this warp's keys.
template <int D, int NK, class T>
__device__ __forceinline__ void qk_tile(float (&s)[NK][4], const uint32_t (&qf)[D / 16][4], const T* sk,
                                        int key_base, int lane) {
#pragma unroll
  for (int n = 0; n < NK; ++n) {
#pragma unroll
    for (int kk = 0; kk < D / 16; kk += 2) {
      uint32_t b[4];  // b[0],b[1]: d step kk; b[2],b[3]: d step kk+1
      ldmatrix_x4(b, sk + swz<D>(key_base + n * 8 + (lane & 7), kk * 16 + (lane >> 3) * 8));
      mma<T>(s[n], qf[kk], b[0], b[1]);
      mma<T>(s[n], qf[kk + 1], b[2], b[3]);
    }
  }
}

// S[MT*16 x 8*NK] += Q K^T for one warp whose MT 16-row slabs of Q start at row q_row of the
// swizzled Q tile sq (Q re-read from shared memory per call: its fragments would not fit in
// registers beside MT slabs of O); each K fragment loaded feeds MT mma. Lay: the tiles' layout.
template <int D, int NK, int MT, class T, class Lay = SwizzledRows<D>>
__device__ __forceinline__ void qk_tile_smem(float (&s)[MT][NK][4], const T* sq, int q_row, const T* sk,
                                             int key_base, int lane) {
#pragma unroll
  for (int kk = 0; kk < D / 16; kk += 2) {
    uint32_t qa[MT][2][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int k2 = 0; k2 < 2; ++k2)
        ldmatrix_x4(qa[mt][k2], sq + Lay::at(q_row + mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                            (kk + k2) * 16 + (lane >> 4) * 8));
#pragma unroll
    for (int n = 0; n < NK; ++n) {
      uint32_t b[4];  // b[0],b[1]: d step kk; b[2],b[3]: d step kk+1
      ldmatrix_x4(b, sk + Lay::at(key_base + n * 8 + (lane & 7), kk * 16 + (lane >> 3) * 8));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma<T>(s[mt][n], qa[mt][0], b[0], b[1]);
        mma<T>(s[mt][n], qa[mt][1], b[2], b[3]);
      }
    }
  }
}

// O[MT*16 x D] += P[MT*16 x 8*NK] V[8*NK x D] for one warp: P from the S fragments (already
// exponentiated), V rows key_base.. of the swizzled tile sv; each V fragment feeds MT mma.
template <int D, int NK, int MT, class T, class Lay = SwizzledRows<D>>
__device__ __forceinline__ void pv_tile(float (&o)[MT][D / 8][4], const float (&p)[MT][NK][4], const T* sv,
                                        int key_base, int lane) {
#pragma unroll
  for (int kk = 0; kk < NK / 2; ++kk) {
    uint32_t a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      a[mt][0] = pack2<T>(p[mt][2 * kk][0], p[mt][2 * kk][1]);
      a[mt][1] = pack2<T>(p[mt][2 * kk][2], p[mt][2 * kk][3]);
      a[mt][2] = pack2<T>(p[mt][2 * kk + 1][0], p[mt][2 * kk + 1][1]);
      a[mt][3] = pack2<T>(p[mt][2 * kk + 1][2], p[mt][2 * kk + 1][3]);
    }
    const int key = key_base + kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int n = 0; n < D / 8; n += 2) {
      uint32_t b[4];  // b[0],b[1]: d tile n; b[2],b[3]: d tile n+1
      ldmatrix_x4_trans(b, sv + Lay::at(key, n * 8 + (lane >> 4) * 8));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma<T>(o[mt][n], a[mt], b[0], b[1]);
        mma<T>(o[mt][n + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// 2^x in one MUFU instruction (flushes denormals; max relative error about 2^-22).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Online softmax step for one warp's 16 rows (this thread: rows g and g+8, index 0 and 1), the
// scores' part: s holds raw scores q·k, masked ones -inf; scale_log2 = scale * log2(e); m is the
// running max in scaled log2 units. On return s holds exp2(s * scale_log2 - m_new) (one FFMA and
// one MUFU per score), l is rescaled and summed, m updated, and corr[r] is the factor the rows'
// O accumulators must be scaled by (rescale_rows; online_softmax does both).
template <int NK>
__device__ __forceinline__ void online_softmax_scores(float (&s)[NK][4], float (&m)[2], float (&l)[2],
                                                      float scale_log2, float (&corr)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < NK; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m[r], mx * scale_log2);
    // A row with no visible key yet keeps m = -inf; use 0 as its base so no inf - inf appears.
    const float base = m_new == -INFINITY ? 0.f : m_new;
    corr[r] = fast_exp2(m[r] - base);
    m[r] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int n = 0; n < NK; ++n) {
      s[n][2 * r] = fast_exp2(fmaf(s[n][2 * r], scale_log2, -base));
      s[n][2 * r + 1] = fast_exp2(fmaf(s[n][2 * r + 1], scale_log2, -base));
      sum += s[n][2 * r] + s[n][2 * r + 1];
    }
    l[r] = l[r] * corr[r] + sum;  // per-thread partial; the quad's sum is taken at the end
  }
}

// O's rows g and g+8 scaled by corr (online_softmax_scores).
template <int D>
__device__ __forceinline__ void rescale_rows(float (&o)[D / 8][4], const float (&corr)[2]) {
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    o[n][0] *= corr[0];
    o[n][1] *= corr[0];
    o[n][2] *= corr[1];
    o[n][3] *= corr[1];
  }
}

// The whole online softmax step: online_softmax_scores, then O rescaled.
template <int D, int NK>
__device__ __forceinline__ void online_softmax(float (&s)[NK][4], float (&m)[2], float (&l)[2], float (&o)[D / 8][4],
                                               float scale_log2) {
  float corr[2];
  online_softmax_scores<NK>(s, m, l, scale_log2, corr);
  rescale_rows<D>(o, corr);
}

// Sum of the per-thread partial row sums over the quad (the 4 threads of a row).
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Normalizes and stores one warp's MT 16-row slabs (o, l: online_softmax's state; rows
// warp_row0 + 16 mt + g and + 8 of the tile, those < rows): row r goes to out + r * row_stride,
// columns [0, D) of the Dp computed.
template <int Dp, int MT, class TO>
__device__ __forceinline__ void store_slabs(TO* out, int64_t row_stride, int D, const float (&o)[MT][Dp / 8][4],
                                            const float (&l)[MT][2], int warp_row0, int rows, int lane) {
  const int g = lane / 4, t4 = lane % 4;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp_row0 + mt * 16 + g + 8 * r;
      const float inv = 1.f / quad_sum(l[mt][r]);
      if (row >= rows) continue;
      TO* dst = out + int64_t(row) * row_stride;
#pragma unroll
      for (int nn = 0; nn < Dp / 8; ++nn) {
        if (nn * 8 >= D) break;
        dst[nn * 8 + 2 * t4] = from_f32<TO>(o[mt][nn][2 * r] * inv);
        dst[nn * 8 + 2 * t4 + 1] = from_f32<TO>(o[mt][nn][2 * r + 1] * inv);
      }
    }
}

}  // namespace vlm::cuda::tile

// Short-context decode: norm + RoPE + K/V write + attention in one cluster launch (decode_short.h
// has the contract and the plan). Tiles, softmax and the cluster merge are the split kernel's
// (mma_tile.cuh, decode_merge.cuh); the norm and rotation are rope_rows.cuh's (the same bits as
// rope_split_q_kv_write).
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/attention/decode_merge.cuh"
#include "kernels/cuda/attention/decode_short.h"
#include "kernels/cuda/attention/mma_tile.cuh"
#include "kernels/cuda/core/pdl.cuh"
#include "kernels/cuda/ops/rope_rows.cuh"

namespace vlm::cuda {
namespace {

constexpr int kWarps = 4, kThreads = 32 * kWarps, kBN = 64, kRows = 16;

// Stages of K/V tiles: kStages - 1 tiles in flight while one computes (a partition of up to
// 2 tiles -- 1K context and 16 splits: 1 -- is all in flight at once). 3 stages at D = 128: 96 KiB,
// two CTAs an SM (a 16-CTA cluster then needs 8 SMs of a GPC).
constexpr int kStages = 3;

// Shared memory (bytes): Q [kRows][D] (T, swizzled), kStages stages of K and V tiles [kBN][D] (T)
// -- reused after the loop by the warps' merge [kWarps][kRows][D + 2] f32 and the cluster partial
// [kRows][D + 2] f32 --, then the new token's K and V rows [2][D] (T).
template <int D, class T>
constexpr int kQBytes = kRows * D * int(sizeof(T));
template <int D, class T>
constexpr int kStageBytes = kStages * 2 * kBN * D * int(sizeof(T));
template <int D>
constexpr int kMergeBytes = (kWarps + 1) * kRows * (D + 2) * 4;
template <int D, class T>
constexpr int kNewOffset = kQBytes<D, T> + std::max(kStageBytes<D, T>, kMergeBytes<D>);
template <int D, class T>
constexpr int short_smem_bytes() {
  return kNewOffset<D, T> + 2 * D * int(sizeof(T));
}

// Grid (n, Hkv, S), clusters of (n, 1, 1), kThreads threads. scale_log2 = scale * log2(e).
template <int D, class T>
__global__ void __launch_bounds__(kThreads)
decode_short_kernel(const T* __restrict__ qkv, int H, const float* __restrict__ table, int R, T* __restrict__ q_out,
                    KVView kv, const int32_t* __restrict__ slots, CudaAttentionBatch batch, float scale_log2,
                    int partition, HeadNorm norm, T* __restrict__ out) {
  pdl_wait();  // a plain launch (clusters): returns at once; kept for pdl.h's rule
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* const sq = reinterpret_cast<T*>(smem_raw);
  T* const kv_smem = sq + kRows * D;
  // Stage i: K at kv_smem + i * 2 * kBN * D, V right after it.
  auto sk = [&](int i) { return kv_smem + i * 2 * kBN * D; };
  auto sv = [&](int i) { return kv_smem + i * 2 * kBN * D + kBN * D; };
  T* const snew = reinterpret_cast<T*>(smem_raw + kNewOffset<D, T>);  // [2][D]: the new K, V rows

  const int split = blockIdx.x, hk = blockIdx.y, s = blockIdx.z;
  const int Hkv = kv.num_kv_heads, G = H / Hkv;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int32_t* tbl = batch.block_tables + int64_t(s) * batch.max_blocks_per_seq;
  // The first tile's block-table entries asked for together with the context length and the slot
  // (one round trip instead of two: the keys of a split are known before its length is).
  constexpr int kChunks = D / 8;                         // 16-byte chunks a row
  constexpr int kIters = kBN * kChunks / kThreads;       // a thread's chunks of a tile
  static_assert(kBN * kChunks % kThreads == 0, "whole tiles a pass");
  int32_t blk0[kIters];
#pragma unroll
  for (int j = 0; j < kIters; ++j) {
    const int key = split * partition + (tid + j * kThreads) / kChunks;
    blk0[j] = tbl[min(key >> kv.block_shift, batch.max_blocks_per_seq - 1)];
  }
  const int ctx = batch.context_lens[s];
  const int32_t slot = slots[s];
  const int p = ctx - 1;          // the new token's position
  const bool fresh = slot >= 0;   // its K/V come from this kernel, not the cache
  int k_begin = split * partition;
  if (k_begin >= ctx) k_begin = max(ctx, 0);  // an empty split still takes part in the merge (m = -inf)
  const int k_end = max(k_begin, min(ctx, k_begin + partition));
  const bool has_new = fresh && p >= k_begin && p < k_end;
  const int num_tiles = (k_end - k_begin + kBN - 1) / kBN;
  // Keys past the new one (and it) zero-filled; the new token's row is put in after its tile landed.
  const int cache_end = fresh ? min(k_end, p) : k_end;
  // Tile 0 from the entries above; tiles 1 .. kStages - 2 through load_kv_tile; one group each.
  {
    const T* kbase = static_cast<const T*>(kv.k);
    const T* vbase = static_cast<const T*>(kv.v);
#pragma unroll
    for (int j = 0; j < kIters; ++j) {
      const int i = tid + j * kThreads, r = i / kChunks, c = i % kChunks;
      const int key = k_begin + r;
      const bool in = num_tiles > 0 && key < cache_end;
      const int64_t off = in ? kv.offset(blk0[j], hk, key & (kv.block_size - 1)) + c * 8 : 0;
      const int at = tile::swz<D>(r, c * 8);
      tile::cp_async16(sk(0) + at, kbase + off, in ? 16 : 0);
      tile::cp_async16(sv(0) + at, vbase + off, in ? 16 : 0);
    }
    tile::cp_async_commit();
  }
#pragma unroll
  for (int t = 1; t < kStages - 1; ++t) {
    if (t < num_tiles) tile::load_kv_tile<kBN, D, kThreads>(kv, tbl, hk, k_begin + t * kBN, cache_end, sk(t), sv(t), tid);
    tile::cp_async_commit();
  }

  // The group's q rows and the new K and V rows, normalized and rotated (rope_kv_write_kernel's
  // arithmetic): items (row, 8-element chunk), rows 0..G-1 the q heads hk * G.., G the key, G + 1
  // the value. A head's D / 8 lanes are an aligned group of one warp (head_norm_x8_supported), and
  // the loop's trip count is uniform, so every lane reaches head_sum.
  {
    constexpr int D8 = D / 8;
    const int rows = G + 2;
    const T* x0 = qkv + int64_t(s) * (H + 2 * Hkv) * D;
    const float* cs = table + int64_t(s) * R;
    for (int base = 0; base < rows * D8; base += kThreads) {
      const int item = base + tid;
      const bool valid = item < rows * D8;
      const int row = valid ? item / D8 : 0, i = (item % D8) * 8;
      const int head = row < G ? hk * G + row : row == G ? H + hk : H + Hkv + hk;  // qkv's head index
      const T* x = x0 + int64_t(head) * D;
      const float* w = nullptr;
      float inv = 0.f;
      if (norm.q_w) {  // uniform
        inv = head_inv_rms(head_sum(valid ? sum_sq8(x + i) : 0.f, D8), D, norm.eps);
        if (row <= G) w = row < G ? norm.q_w : norm.k_w;
      }
      if (!valid) continue;
      const int half = row <= G ? R / 2 : 0;  // v: no rotation
      const uint4 r8 = rope8(x, i, half, cs, w, inv);
      if (row < G) {
        *reinterpret_cast<uint4*>(sq + tile::swz<D>(row, i)) = r8;
        if (split == 0) *reinterpret_cast<uint4*>(q_out + (int64_t(s) * H + hk * G + row) * D + i) = r8;
      } else {
        *reinterpret_cast<uint4*>(snew + (row - G) * D + i) = r8;
        if (has_new) {  // the one CTA of this (sequence, KV head) whose keys hold the new token
          const int64_t off = kv.offset(slot / kv.block_size, hk, slot % kv.block_size) + i;
          *reinterpret_cast<uint4*>(static_cast<T*>(row == G ? kv.k : kv.v) + off) = r8;
        }
      }
    }
    for (int i = G * D8 + tid; i < kRows * D8; i += kThreads)  // rows past G: zero
      *reinterpret_cast<uint4*>(sq + tile::swz<D>(i / D8, (i % D8) * 8)) = make_uint4(0u, 0u, 0u, 0u);
  }
  __syncthreads();
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    tile::ldmatrix_x4(qf[kk], sq + tile::swz<D>((lane & 7) + ((lane >> 3) & 1) * 8, kk * 16 + (lane >> 4) * 8));

  float o[1][D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int t4 = lane % 4;
  for (int n = 0; n < num_tiles; ++n) {
    const int key0 = k_begin + n * kBN;
    tile::cp_async_wait<kStages - 2>();  // tile n's group done (one group per tile, empty past the end)
    __syncthreads();  // ... for every thread's copies; stage (n - 1)'s reads done before it is refilled
    const int next = n + kStages - 1;
    if (next < num_tiles)
      tile::load_kv_tile<kBN, D, kThreads>(kv, tbl, hk, k_begin + next * kBN, cache_end, sk(next % kStages),
                                           sv(next % kStages), tid);
    tile::cp_async_commit();
    T* const tk = sk(n % kStages);
    T* const tv = sv(n % kStages);
    if (has_new && p >= key0 && p < key0 + kBN) {  // uniform: the new token's row from snew
      for (int c = tid; c < 2 * kChunks; c += kThreads) {
        const int which = c / kChunks, i = (c % kChunks) * 8;
        *reinterpret_cast<uint4*>((which == 0 ? tk : tv) + tile::swz<D>(p - key0, i)) =
            *reinterpret_cast<const uint4*>(snew + which * D + i);
      }
      __syncthreads();
    }
    float sc[1][2][4] = {};
    tile::qk_tile<D, 2>(sc[0], qf, tk, warp * 16, lane);
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + warp * 16 + j * 8 + 2 * t4 + (e & 1);
        if (key >= k_end) sc[0][j][e] = -INFINITY;
      }
    tile::online_softmax<D, 2>(sc[0], m, l, o[0], scale_log2);
    tile::pv_tile<D, 2, 1>(o, sc, tv, warp * 16, lane);
  }
  tile::cp_async_wait<0>();  // an empty split's zero-size group too, before the space is reused
  __syncthreads();

  // The 4 warps' merge (the split kernel's), into this split's partial [G][D + 2] for cluster_merge.
  float* red = reinterpret_cast<float*>(kv_smem);  // [kWarps][kRows][D + 2]: O, then m, l
  float* part = red + kWarps * kRows * (D + 2);     // [kRows][D + 2]
  auto at = [&](int w, int row) { return red + (w * kRows + row) * (D + 2); };
  const int g = lane / 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = g + 8 * r;
    const float lsum = tile::quad_sum(l[r]);
    float* dst = at(warp, row);
#pragma unroll
    for (int nn = 0; nn < D / 8; ++nn) {
      dst[nn * 8 + 2 * t4] = o[0][nn][2 * r];
      dst[nn * 8 + 2 * t4 + 1] = o[0][nn][2 * r + 1];
    }
    if (t4 == 0) {
      dst[D] = m[r];
      dst[D + 1] = lsum;
    }
  }
  __syncthreads();
  for (int i = tid; i < G * D; i += kThreads) {
    const int row = i / D, d = i % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, at(w, row)[D]);
    float acc = 0.f, lsum = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float f = exp2f(at(w, row)[D] - mx);  // 0 for a warp that saw no key
      acc += f * at(w, row)[d];
      lsum += f * at(w, row)[D + 1];
    }
    const bool none = mx == -INFINITY;  // an empty split (acc and lsum are NaN)
    part[row * (D + 2) + d] = none ? 0.f : acc;
    if (d == 0) {
      part[row * (D + 2) + D] = mx;
      part[row * (D + 2) + D + 1] = none ? 0.f : lsum;
    }
  }
  __syncthreads();
  decode::cluster_merge<D, kThreads, T>(part, G, int64_t(s) * H + hk * G, out);
}

// Clusters of n CTAs this kernel can launch on the current device (probed once per n).
template <int D, class T>
bool short_cluster_ok(int n) {
  static std::array<int, decode::kMaxCluster + 1> state{};  // 0 unknown, 1 yes, 2 no
  if (n < 1 || n > decode::kMaxCluster) return false;
  if (state[n] == 0) {
    auto* const kernel = decode_short_kernel<D, T>;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(n, 1, 1);
    cfg.blockDim = dim3(kThreads, 1, 1);
    cfg.dynamicSmemBytes = short_smem_bytes<D, T>();
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = n;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    state[n] = cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) == cudaSuccess && clusters > 0 ? 1 : 2;
    (void)cudaGetLastError();  // a refused size is an answer
  }
  return state[n] == 1;
}

// VLM_CUDA_DECODE_SHORT_SPLITS: the most CTAs a (sequence, KV head) gets (a measuring knob, 1..16,
// default 16), read once.
int short_max_splits() {
  static const int v = [] {
    const char* e = std::getenv("VLM_CUDA_DECODE_SHORT_SPLITS");
    const int n = e != nullptr && *e != '\0' ? std::atoi(e) : decode::kMaxCluster;
    return std::clamp(n, 1, decode::kMaxCluster);
  }();
  return v;
}

template <int D, class T>
void launch_short(const void* qkv, int H, const float* table, int R, void* q, const PagedKVLayer& kv,
                  const int32_t* slots, const CudaAttentionBatch& batch, float scale, void* out, const HeadNorm& norm,
                  cudaStream_t stream) {
  auto* const kernel = decode_short_kernel<D, T>;
  constexpr int smem = short_smem_bytes<D, T>();
  once_per_device(reinterpret_cast<const char*>(kernel) + 2, [&] {
    VLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    (void)cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    (void)cudaGetLastError();
  });
  const int ctx = std::max(1, batch.max_context_len);
  int n = std::min((ctx + kBN - 1) / kBN, short_max_splits());
  while (n > 1 && !short_cluster_ok<D, T>(n)) --n;
  const int partition = ((ctx + n - 1) / n + kBN - 1) / kBN * kBN;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(n, kv.num_kv_heads, batch.num_seqs);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = n;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  VLM_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<const T*>(qkv), H, table, R, static_cast<T*>(q),
                                    kv_view(kv), slots, batch, scale * float(M_LOG2E), partition, norm,
                                    static_cast<T*>(out)));
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool decode_short_env() {
  static const bool on = [] {
    const char* e = std::getenv("VLM_CUDA_DECODE_SHORT");
    return e == nullptr || *e == '\0' || std::strcmp(e, "0") != 0;
  }();
  return on;
}

bool decode_short_supported(const PagedKVLayer& kv, DType act, int num_heads, int64_t R, bool norm, int num_seqs,
                            int max_context_len) {
  static const int major = [] {
    int dev = 0, m = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return m;
  }();
  const int Hkv = kv.num_kv_heads;
  return major >= 9 && (act == DType::BF16 || act == DType::F16) && kv.dtype == act &&
         (kv.head_dim == 64 || kv.head_dim == 128) && Hkv > 0 && num_heads % Hkv == 0 && num_heads / Hkv <= kRows &&
         kv.block_size > 0 && (kv.block_size & (kv.block_size - 1)) == 0 && rope_kv_write_supported(kv, act, R) &&
         (!norm || rope_kv_write_norm_supported(kv.head_dim)) && num_seqs >= 1 && num_seqs <= kDecodeShortMaxSeqs &&
         max_context_len <= kDecodeShortMaxContext;
}

void rope_kv_decode_attention(const void* qkv, int num_heads, const float* table, int64_t R, void* q,
                              const PagedKVLayer& kv, const int32_t* slot_mapping, const CudaAttentionBatch& batch,
                              float scale, void* out, DType act, cudaStream_t stream, const HeadNorm& norm) {
  VLM_CHECK(decode_short_supported(kv, act, num_heads, R, norm.q_w != nullptr, batch.num_seqs, batch.max_context_len),
            "rope_kv_decode_attention: unsupported (act {} cache {} D {} H {} Hkv {} R {} seqs {} context {})",
            dtype_name(act), dtype_name(kv.dtype), kv.head_dim, num_heads, kv.num_kv_heads, R, batch.num_seqs,
            batch.max_context_len);
  VLM_CHECK(!norm.q_w || norm.k_w, "rope_kv_decode_attention: a q norm without its k weights");
  VLM_CHECK(batch.group_skip == nullptr, "rope_kv_decode_attention: routed (SinkRouter) steps take the split kernel");
  const int r = static_cast<int>(R);
  auto run = [&](auto d, auto t) {
    launch_short<decltype(d)::value, decltype(t)>(qkv, num_heads, table, r, q, kv, slot_mapping, batch, scale, out,
                                                  norm, stream);
  };
  if (act == DType::BF16) {
    if (kv.head_dim == 64) run(std::integral_constant<int, 64>{}, __nv_bfloat16{});
    else run(std::integral_constant<int, 128>{}, __nv_bfloat16{});
  } else {
    if (kv.head_dim == 64) run(std::integral_constant<int, 64>{}, __half{});
    else run(std::integral_constant<int, 128>{}, __half{});
  }
}

}  // namespace vlm::cuda

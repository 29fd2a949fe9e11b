// LOOK-M's kept-token choice on the device (contract in cuda_look_m.h, look_m_select_kept): one CTA
// per (layer, kv head) segment. Each candidate j < L - M gets a unique 64-bit rank key
// (prior, score, -position) ordered exactly as token_selection.cpp's `before` (the score as
// order-preserving bits, -0 folded into +0 since the CPU compares them equal), the N-th largest key
// is found by an 8-pass radix select (8-bit digits, shared histogram), and the keys >= it are
// written in position order (ballot + warp counts), then the recent window.
#include <cuda_runtime.h>

#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/kv_compression/cuda_look_m.h"

namespace vlm::cuda {
namespace {

constexpr int kThreads = 1024;

__device__ __forceinline__ uint64_t rank_key(const float* s, const uint8_t* is_text, int j, int text_prior, int sinks) {
  const float x = s[j];
  uint32_t b = __float_as_uint(x == 0.f ? 0.f : x);
  b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  const bool prior = text_prior ? is_text[j] != 0 : j < sinks;
  return (uint64_t(prior) << 63) | (uint64_t(b) << 31) | uint64_t(0x7fffffffu - uint32_t(j));
}

__global__ void __launch_bounds__(kThreads)
select_kernel(const float* __restrict__ scores, int64_t stride, const uint8_t* __restrict__ is_text, int L, int M, int N,
              int text_prior, int sinks, int32_t* __restrict__ kept) {
  __shared__ unsigned hist[256];
  __shared__ int warp_n[kThreads / 32];
  __shared__ uint64_t prefix_s;
  __shared__ int need_s, base_s;
  const float* s = scores + blockIdx.x * stride;
  int32_t* out = kept + int64_t(blockIdx.x) * (N + M);
  const int cand = L - M, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  uint64_t prefix = 0, mask = 0;
  if (N > 0) {
    int need = N;  // the need-th largest key among those matching prefix under mask
    for (int shift = 56; shift >= 0; shift -= 8) {
      for (int i = tid; i < 256; i += kThreads) hist[i] = 0;
      __syncthreads();
      for (int j = tid; j < cand; j += kThreads) {
        const uint64_t k = rank_key(s, is_text, j, text_prior, sinks);
        if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255], 1u);
      }
      __syncthreads();
      if (tid == 0) {
        int acc = 0;
        for (int d = 255; d >= 0; --d) {
          if (acc + int(hist[d]) >= need) {
            prefix |= uint64_t(d) << shift;
            need -= acc;
            break;
          }
          acc += int(hist[d]);
        }
        prefix_s = prefix;
        need_s = need;
      }
      __syncthreads();
      prefix = prefix_s;
      need = need_s;
      mask |= uint64_t(255) << shift;
    }
    // prefix: the N-th largest key (keys are unique, so exactly N keys are >= it).
    if (tid == 0) base_s = 0;
    __syncthreads();
    for (int j0 = 0; j0 < cand; j0 += kThreads) {
      const int j = j0 + tid;
      const bool sel = j < cand && rank_key(s, is_text, j, text_prior, sinks) >= prefix;
      const unsigned ballot = __ballot_sync(0xffffffffu, sel);
      if (lane == 0) warp_n[warp] = __popc(ballot);
      __syncthreads();
      int before = base_s;
      for (int w = 0; w < warp; ++w) before += warp_n[w];
      if (sel) out[before + __popc(ballot & ((1u << lane) - 1u))] = j;
      __syncthreads();
      if (tid == 0) {
        int t = 0;
        for (int w = 0; w < kThreads / 32; ++w) t += warp_n[w];
        base_s += t;
      }
      __syncthreads();
    }
  }
  for (int j = tid; j < M; j += kThreads) out[N + j] = cand + j;
}

}  // namespace

void look_m_select_kept(const float* scores, int64_t stride, int segments, const uint8_t* is_text, int32_t L,
                        int32_t recent, int32_t important, bool text_prior, int32_t num_sink_tokens, int32_t* kept,
                        cudaStream_t stream) {
  VLM_CHECK(recent >= 0 && important >= 0 && recent + important < L && stride >= L,
            "LOOK-M select: L {} M {} N {} stride {}", L, recent, important, stride);
  if (segments == 0) return;
  select_kernel<<<segments, kThreads, 0, stream>>>(scores, stride, is_text, L, recent, important, text_prior ? 1 : 0,
                                                   num_sink_tokens, kept);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda

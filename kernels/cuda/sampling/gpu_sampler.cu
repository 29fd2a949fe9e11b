#include "kernels/cuda/sampling/gpu_sampler.h"

#include <cfloat>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "kernels/cuda/core/cuda_check.h"

namespace vlm::cuda {

namespace {

constexpr int kThreads = 1024;

struct ArgMax {
  float v;
  int32_t i;
};
// Larger value first, then lower id: the CPU's argmax / top-logprob order.
__device__ __forceinline__ bool before(float av, int32_t ai, float bv, int32_t bi) {
  return av > bv || (av == bv && ai < bi);
}
struct ArgMaxOp {
  __device__ ArgMax operator()(const ArgMax& a, const ArgMax& b) const { return before(a.v, a.i, b.v, b.i) ? a : b; }
};

using ReduceArg = cub::BlockReduce<ArgMax, kThreads>;
using ReduceD = cub::BlockReduce<double, kThreads>;
using ReduceI = cub::BlockReduce<long long, kThreads>;
using ScanD = cub::BlockScan<double, kThreads>;

union Shared {
  ReduceArg::TempStorage arg;
  ReduceD::TempStorage d;
  ReduceI::TempStorage i;
  ScanD::TempStorage scan;
};

// The largest (value, id) strictly after (after_v, after_i) in the order above, over x[V].
__device__ ArgMax block_argmax(const float* x, int64_t V, float after_v, int32_t after_i, bool bounded, Shared& sh,
                               ArgMax* result) {
  ArgMax best{-FLT_MAX, INT32_MAX};
  bool any = false;
  const auto take = [&](float v, int64_t i) {
    if (bounded && !before(after_v, after_i, v, static_cast<int32_t>(i))) return;
    if (!any || before(v, static_cast<int32_t>(i), best.v, best.i)) best = {v, static_cast<int32_t>(i)};
    any = true;
  };
  if (V % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0) {  // 16-byte loads: 4x the bytes in flight
    // kArgLoads loads of a thread in flight at once (one block scans the whole row: a decode step's
    // greedy sample waits on it), taken in the same order as one at a time: the same result.
    constexpr int kArgLoads = 4;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const int64_t n4 = V / 4;
    for (int64_t base = threadIdx.x; base < n4; base += int64_t(kThreads) * kArgLoads) {
      float4 v[kArgLoads];
#pragma unroll
      for (int u = 0; u < kArgLoads; ++u) {
        const int64_t i = base + int64_t(u) * kThreads;
        v[u] = i < n4 ? x4[i] : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int u = 0; u < kArgLoads; ++u) {
        const int64_t i = base + int64_t(u) * kThreads;
        if (i < n4) take(v[u].x, 4 * i), take(v[u].y, 4 * i + 1), take(v[u].z, 4 * i + 2), take(v[u].w, 4 * i + 3);
      }
    }
  } else {
    for (int64_t i = threadIdx.x; i < V; i += kThreads) take(x[i], i);
  }
  if (!any) best = {-INFINITY, INT32_MAX};
  __syncthreads();
  const ArgMax r = ReduceArg(sh.arg).Reduce(best, ArgMaxOp());
  if (threadIdx.x == 0) *result = r;
  __syncthreads();
  return *result;
}

__device__ double block_sum(double v, Shared& sh, double* result) {
  __syncthreads();
  const double r = ReduceD(sh.d).Sum(v);
  if (threadIdx.x == 0) *result = r;
  __syncthreads();
  return *result;
}

__device__ long long block_count(long long v, Shared& sh, long long* result) {
  __syncthreads();
  const long long r = ReduceI(sh.i).Sum(v);
  if (threadIdx.x == 0) *result = r;
  __syncthreads();
  return *result;
}

// Order-preserving map of a float to uint32 (for bisection over values).
__device__ __forceinline__ uint32_t key_of(float f) {
  const uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float float_of(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// The general path of sample_kernel: penalties, mask and temperature on the working copy w, then the
// greedy choice or a draw (top-k, min-p, top-p).
__device__ int32_t pick(const float* raw, int64_t V, const SampleJob& job, const int32_t* pen_tok,
                        const int32_t* pen_cnt, const int32_t* mask, float* w, Shared& sh, ArgMax& arg_result,
                        double& d_result, long long& i_result, int32_t& picked) {
  for (int64_t i = threadIdx.x; i < V; i += kThreads) w[i] = raw[i];
  __syncthreads();
  for (int j = job.penalty_begin + threadIdx.x; j < job.penalty_end; j += kThreads) {
    const int32_t t = pen_tok[j];
    float l = w[t];
    if (job.repetition_penalty != 1.0f) l = l > 0 ? l / job.repetition_penalty : l * job.repetition_penalty;
    if (pen_cnt[j] > 0) l -= job.frequency_penalty * static_cast<float>(pen_cnt[j]) + job.presence_penalty;
    w[t] = l;
  }
  __syncthreads();
  for (int j = job.mask_begin + threadIdx.x; j < job.mask_end; j += kThreads) w[mask[j]] = -INFINITY;
  __syncthreads();

  int32_t token;
  if (job.temperature < 1e-5f) {
    token = block_argmax(w, V, 0, 0, false, sh, &arg_result).i;
  } else {
    const float inv_t = 1.0f / job.temperature;
    for (int64_t i = threadIdx.x; i < V; i += kThreads) w[i] = w[i] * inv_t;
    __syncthreads();
    const float m = block_argmax(w, V, 0, 0, false, sh, &arg_result).v;
    float cut = -INFINITY;
    if (job.min_p > 0.0f) cut = m + logf(job.min_p);
    if (job.top_k > 0 && job.top_k < V) {
      // The k-th largest value: the largest key c with count(w >= c) >= k.
      // Keys in 64 bits: hi - lo + 1 overflows 32 (and a key wrapping below 0 never ends the loop).
      // Finite values only (the keys outside are NaNs).
      uint64_t lo = key_of(-FLT_MAX), hi = key_of(FLT_MAX);
      while (lo < hi) {
        const uint64_t mid = lo + (hi - lo + 1) / 2;
        const float c = float_of(static_cast<uint32_t>(mid));
        long long n = 0;
        for (int64_t i = threadIdx.x; i < V; i += kThreads) n += w[i] >= c;
        if (block_count(n, sh, &i_result) >= job.top_k) lo = mid; else hi = mid - 1;
      }
      cut = fmaxf(cut, float_of(static_cast<uint32_t>(lo)));
    }
    // w becomes the unnormalized probability of each kept token (0 for the others).
    double total = 0;
    for (int64_t i = threadIdx.x; i < V; i += kThreads) {
      const float l = w[i];
      const float p = (l < cut || l == -INFINITY) ? 0.0f : static_cast<float>(exp(static_cast<double>(l - m)));
      w[i] = p;
      total += p;
    }
    total = block_sum(total, sh, &d_result);
    if (job.top_p < 1.0f) {
      // Keep p >= c*, c* the smallest key with mass(p > c*) < top_p * total.
      const double target = static_cast<double>(job.top_p) * total;
      uint32_t lo = key_of(0.0f), hi = key_of(FLT_MAX);
      while (lo < hi) {
        const uint32_t mid = lo + (hi - lo) / 2;
        const float c = float_of(mid);
        double mass = 0;
        for (int64_t i = threadIdx.x; i < V; i += kThreads) mass += w[i] > c ? w[i] : 0.0f;
        if (block_sum(mass, sh, &d_result) < target) hi = mid; else lo = mid + 1;
      }
      const float c = float_of(lo);
      total = 0;
      for (int64_t i = threadIdx.x; i < V; i += kThreads) {
        if (w[i] < c) w[i] = 0.0f;
        total += w[i];
      }
      total = block_sum(total, sh, &d_result);
    }
    // Inverse CDF in id order: each thread owns a contiguous chunk.
    const int64_t chunk = (V + kThreads - 1) / kThreads;
    const int64_t b = threadIdx.x * chunk, e = b + chunk < V ? b + chunk : V;
    double mine = 0;
    for (int64_t i = b; i < e; ++i) mine += w[i];
    double before_mine = 0;
    __syncthreads();
    ScanD(sh.scan).ExclusiveSum(mine, before_mine);
    if (threadIdx.x == 0) picked = -1;
    __syncthreads();
    const double target = job.u * total;
    if (before_mine <= target && target < before_mine + mine) {
      double acc = before_mine;
      for (int64_t i = b; i < e; ++i) {
        acc += w[i];
        if (w[i] > 0.0f && target < acc) {
          picked = static_cast<int32_t>(i);
          break;
        }
      }
    }
    __syncthreads();
    if (picked < 0) {  // target within rounding of the total: the last kept token
      long long last = -1;
      for (int64_t i = threadIdx.x; i < V; i += kThreads)
        if (w[i] > 0.0f) last = i;
      __syncthreads();
      const long long r = cub::BlockReduce<long long, kThreads>(sh.i).Reduce(last, ::cuda::maximum<>{});
      if (threadIdx.x == 0) picked = static_cast<int32_t>(r);
      __syncthreads();
    }
    token = picked;
  }
  return token;
}

// Writes the token and, when the job asks (num_top >= 0), its logprob, rank and the top logprobs of
// the raw row.
__device__ void finish(const float* raw, int64_t V, const SampleJob& job, int32_t token, SampleOut* o, Shared& sh,
                       ArgMax& arg_result, double& d_result, long long& i_result) {
  if (threadIdx.x == 0) o->token = token;
  if (job.num_top < 0) return;
  // Logprobs of the raw row.
  const ArgMax top = block_argmax(raw, V, 0, 0, false, sh, &arg_result);
  double sum = 0;
  for (int64_t i = threadIdx.x; i < V; i += kThreads) sum += exp(static_cast<double>(raw[i] - top.v));
  const double lse = top.v + log(block_sum(sum, sh, &d_result));
  const float lt = raw[token];
  long long greater = 0;
  for (int64_t i = threadIdx.x; i < V; i += kThreads) greater += raw[i] > lt;
  const long long rank = 1 + block_count(greater, sh, &i_result);
  if (threadIdx.x == 0) {
    o->logprob = static_cast<float>(lt - lse);
    o->rank = rank;
  }
  ArgMax prev = top;
  for (int k = 0; k < job.num_top && k < kMaxTopLogprobs && k < V; ++k) {
    if (k > 0) prev = block_argmax(raw, V, prev.v, prev.i, true, sh, &arg_result);
    if (threadIdx.x == 0) {
      o->top_ids[k] = prev.i;
      o->top_logprobs[k] = static_cast<float>(prev.v - lse);
    }
  }
}

__global__ void __launch_bounds__(kThreads) sample_kernel(const float* logits, int64_t V, const SampleJob* jobs,
                                                          const int32_t* pen_tok, const int32_t* pen_cnt,
                                                          const int32_t* mask, float* work, SampleOut* out) {
  __shared__ Shared sh;
  __shared__ ArgMax arg_result;
  __shared__ double d_result;
  __shared__ long long i_result;
  __shared__ int32_t picked;
  const SampleJob job = jobs[blockIdx.x];
  const float* raw = logits + static_cast<int64_t>(job.row) * V;
  float* w = work + static_cast<int64_t>(blockIdx.x) * V;
  int32_t token;
  if (job.temperature < 1e-5f && job.penalty_begin == job.penalty_end && job.mask_begin == job.mask_end) {
    // Greedy over the raw row (no penalties, no mask): no working copy.
    token = block_argmax(raw, V, 0, 0, false, sh, &arg_result).i;
  } else {
    token = pick(raw, V, job, pen_tok, pen_cnt, mask, w, sh, arg_result, d_result, i_result, picked);
  }
  finish(raw, V, job, token, out + blockIdx.x, sh, arg_result, d_result, i_result);
}

}  // namespace

void sample_rows(const float* logits, int64_t V, const SampleJob* jobs, int J, const int32_t* penalty_tokens,
                 const int32_t* penalty_counts, const int32_t* mask_tokens, float* work, SampleOut* out,
                 cudaStream_t s) {
  if (J == 0) return;
  sample_kernel<<<J, kThreads, 0, s>>>(logits, V, jobs, penalty_tokens, penalty_counts, mask_tokens, work, out);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda

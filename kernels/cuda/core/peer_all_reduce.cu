#include "kernels/cuda/core/peer_all_reduce.h"

#include <algorithm>

#include <fmt/format.h>

#include "kernels/core/check.h"
#include "kernels/core/device_error.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/element.cuh"

namespace vlm::cuda {
namespace {

constexpr int kMaxRanks = PeerAllReduce::kMaxRanks;
constexpr int kMaxBlocks = PeerAllReduce::kMaxBlocks;
constexpr int kThreads = PeerAllReduce::kThreads;
constexpr size_t kChunk = 16;  // bytes per thread and step
// Area of a rank: flags [kMaxBlocks][kMaxRanks] u32, counters [kMaxBlocks] u32, then staging.
constexpr size_t kFlagsBytes = sizeof(uint32_t) * kMaxBlocks * kMaxRanks;
constexpr size_t kStagingOffset = 256 * ((kFlagsBytes + sizeof(uint32_t) * kMaxBlocks + 255) / 256);

struct PeerPtrs {
  const char* staging[kMaxRanks];  // rank p's staging [2][capacity]
  uint32_t* flags[kMaxRanks];      // rank p's flags [kMaxBlocks][kMaxRanks]
};

__device__ __forceinline__ void store_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// A peer that has not signalled after this long never will (a rank skipped a call, or a bug): the
// kernel traps, so the process fails with a CUDA error instead of hanging.
constexpr uint64_t kWaitLimitNs = 60ull * 1000 * 1000 * 1000;

// The elements [k * V, k * V + V) of buf (V = 16 / sizeof(T)) as 16 bytes; past `count`: zeros.
template <typename T>
__device__ __forceinline__ uint4 load_chunk(const T* buf, int64_t k, int64_t count, bool aligned) {
  constexpr int V = kChunk / sizeof(T);
  const int64_t i0 = k * V;
  if (aligned && i0 + V <= count) return reinterpret_cast<const uint4*>(buf)[k];
  uint4 r = make_uint4(0, 0, 0, 0);
  T* e = reinterpret_cast<T*>(&r);
#pragma unroll
  for (int j = 0; j < V; ++j)
    if (i0 + j < count) e[j] = buf[i0 + j];
  return r;
}

template <typename T>
__device__ __forceinline__ void store_chunk(T* buf, int64_t k, int64_t count, bool aligned, const uint4& v) {
  constexpr int V = kChunk / sizeof(T);
  const int64_t i0 = k * V;
  if (aligned && i0 + V <= count) {
    reinterpret_cast<uint4*>(buf)[k] = v;
    return;
  }
  const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
  for (int j = 0; j < V; ++j)
    if (i0 + j < count) buf[i0 + j] = e[j];
}

// One rank's kernel; grid = the blocks that own a chunk (<= kMaxBlocks), block = kThreads.
// buf [count] in place; staging offsets are of parity (counter + 1) & 1.
// peers is indexed only by compile-time indices (unrolled loops over N): a dynamic index would copy
// the 128-byte parameter to local memory in every thread. mine: rank's staging; my_flags: its flags.
template <typename T, int N>
__global__ void __launch_bounds__(kThreads) peer_all_reduce_kernel(PeerPtrs peers, int rank, char* my_staging,
                                                                   const uint32_t* my_flags, T* buf, int64_t count,
                                                                   bool aligned, uint32_t* counters, size_t capacity) {
  constexpr int V = kChunk / sizeof(T);
  const int b = blockIdx.x;
  __shared__ uint32_t s_call;
  if (threadIdx.x == 0) s_call = counters[b] + 1;
  __syncthreads();
  const uint32_t call = s_call;
  const size_t parity = (call & 1u) * capacity;
  const int64_t chunks = (count + V - 1) / V;
  const int64_t stride = static_cast<int64_t>(kMaxBlocks) * kThreads;  // chunk k: block (k / kThreads) % kMaxBlocks
  uint4* mine = reinterpret_cast<uint4*>(my_staging + parity);

  // 1. this block's chunks into its own staging
  for (int64_t k = static_cast<int64_t>(b) * kThreads + threadIdx.x; k < chunks; k += stride)
    mine[k] = load_chunk(buf, k, count, aligned);
  __syncthreads();

  // 2. barrier of block b across the ranks: thread p signals rank p, then waits for rank p's signal
  if (threadIdx.x < N) {
    __threadfence_system();
#pragma unroll
    for (int p = 0; p < N; ++p)
      if (threadIdx.x == p) store_release_sys(peers.flags[p] + b * kMaxRanks + rank, call);
    const uint32_t* f = my_flags + b * kMaxRanks + threadIdx.x;
    uint64_t start = 0;
    for (uint32_t spins = 0; static_cast<int32_t>(load_acquire_sys(f) - call) < 0; ++spins) {
      if ((spins & 1023u) != 1023u) continue;
      const uint64_t now = global_ns();
      if (start == 0) {
        start = now;
      } else if (now - start > kWaitLimitNs) {
        printf("peer all-reduce: rank %d block %d waited 60 s for rank %d's call %u (flag %u); trapping\n", rank, b,
               static_cast<int>(threadIdx.x), call, load_acquire_sys(f));
        __trap();
      }
    }
  }
  __syncthreads();

  // 3. sum every rank's staging for these chunks, rank 0 first, in f32
  for (int64_t k = static_cast<int64_t>(b) * kThreads + threadIdx.x; k < chunks; k += stride) {
    uint4 v[N];
#pragma unroll
    for (int p = 0; p < N; ++p) v[p] = __ldcg(reinterpret_cast<const uint4*>(peers.staging[p] + parity) + k);
    float acc[V];
    const T* e0 = reinterpret_cast<const T*>(&v[0]);
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = to_f32(e0[j]);
#pragma unroll
    for (int p = 1; p < N; ++p) {
      const T* e = reinterpret_cast<const T*>(&v[p]);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] += to_f32(e[j]);
    }
    uint4 out;
    T* o = reinterpret_cast<T*>(&out);
#pragma unroll
    for (int j = 0; j < V; ++j) o[j] = from_f32<T>(acc[j]);
    store_chunk(buf, k, count, aligned, out);
  }
  if (threadIdx.x == 0) counters[b] = call;
}

template <typename T, int N>
void launch(const PeerPtrs& p, int rank, void* buf, int64_t count, uint32_t* counters, size_t capacity,
            cudaStream_t stream) {
  const int64_t chunks = (count * static_cast<int64_t>(sizeof(T)) + kChunk - 1) / kChunk;
  const int grid = static_cast<int>(std::min<int64_t>(kMaxBlocks, (chunks + kThreads - 1) / kThreads));
  const bool aligned = reinterpret_cast<uintptr_t>(buf) % kChunk == 0;
  peer_all_reduce_kernel<T, N><<<grid, kThreads, 0, stream>>>(p, rank, const_cast<char*>(p.staging[rank]), p.flags[rank],
                                                               static_cast<T*>(buf), count, aligned, counters, capacity);
}

template <typename T>
void launch_ranks(int n, const PeerPtrs& p, int rank, void* buf, int64_t count, uint32_t* counters, size_t capacity,
                  cudaStream_t s) {
  switch (n) {
    case 2: return launch<T, 2>(p, rank, buf, count, counters, capacity, s);
    case 3: return launch<T, 3>(p, rank, buf, count, counters, capacity, s);
    case 4: return launch<T, 4>(p, rank, buf, count, counters, capacity, s);
    case 5: return launch<T, 5>(p, rank, buf, count, counters, capacity, s);
    case 6: return launch<T, 6>(p, rank, buf, count, counters, capacity, s);
    case 7: return launch<T, 7>(p, rank, buf, count, counters, capacity, s);
    case 8: return launch<T, 8>(p, rank, buf, count, counters, capacity, s);
    default: precondition_failed("peer all-reduce of 2..8 ranks");
  }
}

}  // namespace

bool peer_access_possible(const std::vector<int>& devices, std::string* why) {
  if (devices.size() < 2 || devices.size() > static_cast<size_t>(kMaxRanks)) {
    if (why != nullptr) *why = fmt::format("a peer all-reduce needs 2..{} GPUs, not {}", kMaxRanks, devices.size());
    return false;
  }
  for (int a : devices)
    for (int b : devices) {
      if (a == b) continue;
      int can = 0;
      if (cudaDeviceCanAccessPeer(&can, a, b) != cudaSuccess || can == 0) {
        cudaGetLastError();
        if (why != nullptr) *why = fmt::format("GPU {} cannot access GPU {}'s memory (cudaDeviceCanAccessPeer)", a, b);
        return false;
      }
    }
  return true;
}

PeerAllReduce::PeerAllReduce(const std::vector<int>& devices, size_t capacity_bytes)
    : devices_(devices), capacity_(kChunk * ((std::max<size_t>(capacity_bytes, 1) + kChunk - 1) / kChunk)) {
  std::string why;
  if (!peer_access_possible(devices, &why)) throw DeviceError("peer all-reduce: " + why);
  int before = 0;
  VLM_CUDA_CHECK(cudaGetDevice(&before));
  try {
    for (int a : devices) {
      VLM_CUDA_CHECK(cudaSetDevice(a));
      for (int b : devices) {
        if (a == b) continue;
        const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
        if (e == cudaErrorPeerAccessAlreadyEnabled)
          cudaGetLastError();
        else
          VLM_CUDA_CHECK(e);
      }
      const size_t bytes = kStagingOffset + 2 * capacity_;
      void* area = nullptr;
      VLM_CUDA_CHECK(cudaMalloc(&area, bytes));
      areas_.push_back(static_cast<char*>(area));
      VLM_CUDA_CHECK(cudaMemset(area, 0, bytes));
    }
    for (int a : devices) {
      VLM_CUDA_CHECK(cudaSetDevice(a));
      VLM_CUDA_CHECK(cudaDeviceSynchronize());  // the zeroed flags before any kernel reads them
    }
  } catch (...) {
    for (size_t r = 0; r < areas_.size(); ++r) {
      cudaSetDevice(devices_[r]);
      cudaFree(areas_[r]);
    }
    cudaSetDevice(before);
    throw;
  }
  VLM_CUDA_CHECK(cudaSetDevice(before));
}

PeerAllReduce::~PeerAllReduce() {
  int before = 0;
  cudaGetDevice(&before);
  for (size_t r = 0; r < areas_.size(); ++r) {
    cudaSetDevice(devices_[r]);
    cudaFree(areas_[r]);
  }
  cudaSetDevice(before);
}

bool PeerAllReduce::accepts(int64_t count, DType dtype) const {
  if (dtype != DType::F32 && dtype != DType::BF16 && dtype != DType::F16) return false;
  return count >= 0 && static_cast<size_t>(count) * dtype_size(dtype) <= capacity_;
}

void PeerAllReduce::all_reduce_sum(int rank, void* buf, int64_t count, DType dtype, cudaStream_t stream) {
  VLM_CHECK(rank >= 0 && rank < size(), "peer all-reduce rank {} of {}", rank, size());
  VLM_CHECK(accepts(count, dtype), "peer all-reduce of {} x {} (capacity {} bytes)", count, dtype_name(dtype), capacity_);
  if (count == 0) return;
  PeerPtrs p{};
  for (int r = 0; r < size(); ++r) {
    p.staging[r] = areas_[static_cast<size_t>(r)] + kStagingOffset;
    p.flags[r] = reinterpret_cast<uint32_t*>(areas_[static_cast<size_t>(r)]);
  }
  uint32_t* counters = reinterpret_cast<uint32_t*>(areas_[static_cast<size_t>(rank)] + kFlagsBytes);
  dispatch_float(dtype, [&](auto t) {
    using T = decltype(t);
    launch_ranks<T>(size(), p, rank, buf, count, counters, capacity_, stream);
  });
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda

// Tensor parallelism's all-reduce, NCCL against the peer-access one-shot all-reduce
// (kernels/cuda/core/peer_all_reduce.h), on the first N GPUs of this host (issue 42): us per call
// for message sizes 4 KB..4 MB of bf16 (and 7 KB, 16 KB: one decode sequence of Qwen2-7B, 72B).
//  eager: one host thread per rank (as CudaRankGroup) queues `calls` all-reduces back to back;
//         device events on rank 0's stream around them.
//  graph: each rank captures `calls` all-reduces in one CUDA graph, replayed `replays` times (as
//         the decode graphs run them); events around the replays.
// Warm-up first; the median of `reps` repeats. The peer results are checked against NCCL's once
// per size (two ranks: bit for bit).
// Usage: bench_cuda_allreduce [--gpus N] [--calls 50] [--replays 10] [--reps 5] [--dtype bf16|f16|f32]
//                             [--sizes 4096,7168,...]
// Output: one line per size, "allreduce bytes=.. nccl_eager_us=.. peer_eager_us=.. nccl_graph_us=..
// peer_graph_us=.. graph_speedup=..".
#include <cuda_runtime.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/core/dtype.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/nccl_communicator.h"
#include "kernels/cuda/core/peer_all_reduce.h"

namespace {

using namespace vlm;

// One all-reduce of rank r on stream s.
using CallFn = std::function<void(int r, void* buf, int64_t count, cudaStream_t s)>;

// Runs fn(r) on one thread per rank (each with its GPU current) and waits.
void on_ranks(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> t;
  for (int r = 0; r < n; ++r)
    t.emplace_back([&, r] {
      VLM_CUDA_CHECK(cudaSetDevice(r));
      fn(r);
    });
  for (auto& x : t) x.join();
}

struct Options {
  int gpus = 2, calls = 50, replays = 10, reps = 5;
  DType dtype = DType::BF16;
  std::vector<int64_t> sizes = {4096, 7168, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576, 2097152, 4194304};
};

// Median us per call of `call` over the ranks, eager or in a graph. bufs[r]: rank r's buffer.
double time_calls(const Options& o, const CallFn& call, const std::vector<void*>& bufs, const std::vector<cudaStream_t>& streams,
                  int64_t count, bool graph) {
  std::vector<double> us;
  std::vector<cudaGraphExec_t> execs(static_cast<size_t>(o.gpus), nullptr);
  if (graph)
    on_ranks(o.gpus, [&](int r) {
      const size_t ri = static_cast<size_t>(r);
      cudaGraph_t g = nullptr;
      VLM_CUDA_CHECK(cudaStreamBeginCapture(streams[ri], cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < o.calls; ++i) call(r, bufs[ri], count, streams[ri]);
      VLM_CUDA_CHECK(cudaStreamEndCapture(streams[ri], &g));
      VLM_CUDA_CHECK(cudaGraphInstantiate(&execs[ri], g, 0));
      VLM_CUDA_CHECK(cudaGraphDestroy(g));
    });
  for (int rep = -1; rep < o.reps; ++rep) {  // rep -1: warm-up
    float ms = 0;
    on_ranks(o.gpus, [&](int r) {
      const size_t ri = static_cast<size_t>(r);
      cudaEvent_t a = nullptr, b = nullptr;
      VLM_CUDA_CHECK(cudaEventCreate(&a));
      VLM_CUDA_CHECK(cudaEventCreate(&b));
      VLM_CUDA_CHECK(cudaEventRecord(a, streams[ri]));
      if (graph)
        for (int k = 0; k < o.replays; ++k) VLM_CUDA_CHECK(cudaGraphLaunch(execs[ri], streams[ri]));
      else
        for (int i = 0; i < o.calls; ++i) call(r, bufs[ri], count, streams[ri]);
      VLM_CUDA_CHECK(cudaEventRecord(b, streams[ri]));
      VLM_CUDA_CHECK(cudaEventSynchronize(b));
      if (r == 0) VLM_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    });
    const int n_calls = graph ? o.calls * o.replays : o.calls;
    if (rep >= 0) us.push_back(1000.0 * ms / n_calls);
  }
  if (graph)
    on_ranks(o.gpus, [&](int r) { cudaGraphExecDestroy(execs[static_cast<size_t>(r)]); });
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

std::vector<int64_t> parse_sizes(const std::string& s) {
  std::vector<int64_t> v;
  size_t at = 0;
  while (at < s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    v.push_back(std::atoll(s.substr(at, comma - at).c_str()));
    at = comma + 1;
  }
  return v;
}

int run(const Options& o) {
  std::vector<int> devs;
  for (int r = 0; r < o.gpus; ++r) devs.push_back(r);
  std::string why;
  if (!cuda::peer_access_possible(devs, &why)) {
    std::fprintf(stderr, "no peer access: %s\n", why.c_str());
    return 1;
  }
  auto nccl = std::make_shared<cuda::NcclGroup>(devs);
  const int64_t max_bytes = *std::max_element(o.sizes.begin(), o.sizes.end());
  cuda::PeerAllReduce peer(devs, static_cast<size_t>(max_bytes));
  std::vector<std::unique_ptr<cuda::NcclCommunicator>> comms;
  for (int r = 0; r < o.gpus; ++r) comms.push_back(std::make_unique<cuda::NcclCommunicator>(nccl, r));
  std::vector<void*> bufs(static_cast<size_t>(o.gpus)), check(static_cast<size_t>(o.gpus));
  std::vector<cudaStream_t> streams(static_cast<size_t>(o.gpus));
  on_ranks(o.gpus, [&](int r) {
    const size_t ri = static_cast<size_t>(r);
    VLM_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[ri], cudaStreamNonBlocking));
    VLM_CUDA_CHECK(cudaMalloc(&bufs[ri], static_cast<size_t>(max_bytes)));
    VLM_CUDA_CHECK(cudaMalloc(&check[ri], static_cast<size_t>(max_bytes)));
  });
  const CallFn nccl_call = [&](int r, void* b, int64_t c, cudaStream_t s) { comms[static_cast<size_t>(r)]->all_reduce_sum(b, c, o.dtype, s); };
  const CallFn peer_call = [&](int r, void* b, int64_t c, cudaStream_t s) { peer.all_reduce_sum(r, b, c, o.dtype, s); };
  std::printf("# %d GPUs, %s, %d calls, %d graph replays, median of %d; %s\n", o.gpus, dtype_name(o.dtype), o.calls, o.replays,
              o.reps, cuda::describe_gpu(0).c_str());
  for (int64_t bytes : o.sizes) {
    const int64_t count = bytes / static_cast<int64_t>(dtype_size(o.dtype));
    // Small values (sums stay exact-ish) in both buffers; the peer result checked against NCCL's.
    int64_t mismatches = 0;
    std::vector<std::vector<char>> got(2);
    on_ranks(o.gpus, [&](int r) {
      const size_t ri = static_cast<size_t>(r);
      std::vector<float> v(static_cast<size_t>(count));
      std::mt19937 rng(static_cast<uint32_t>(r + 1));
      std::normal_distribution<float> d;
      for (float& x : v) x = d(rng);
      std::vector<char> h(static_cast<size_t>(bytes));
      convert_from_f32(v.data(), o.dtype, h.data(), count);
      VLM_CUDA_CHECK(cudaMemcpy(bufs[ri], h.data(), h.size(), cudaMemcpyHostToDevice));
      VLM_CUDA_CHECK(cudaMemcpy(check[ri], h.data(), h.size(), cudaMemcpyHostToDevice));
      nccl_call(r, bufs[ri], count, streams[ri]);
      peer_call(r, check[ri], count, streams[ri]);
      VLM_CUDA_CHECK(cudaStreamSynchronize(streams[ri]));
      if (r == 0) {
        got[0].resize(h.size());
        got[1].resize(h.size());
        VLM_CUDA_CHECK(cudaMemcpy(got[0].data(), bufs[ri], h.size(), cudaMemcpyDeviceToHost));
        VLM_CUDA_CHECK(cudaMemcpy(got[1].data(), check[ri], h.size(), cudaMemcpyDeviceToHost));
      }
    });
    for (int64_t i = 0; i < count; ++i)
      mismatches += load_as_f32(got[0].data(), o.dtype, i) != load_as_f32(got[1].data(), o.dtype, i);
    const double ne = time_calls(o, nccl_call, bufs, streams, count, false);
    const double pe = time_calls(o, peer_call, bufs, streams, count, false);
    const double ng = time_calls(o, nccl_call, bufs, streams, count, true);
    const double pg = time_calls(o, peer_call, bufs, streams, count, true);
    std::printf(
        "allreduce bytes=%lld nccl_eager_us=%.2f peer_eager_us=%.2f nccl_graph_us=%.2f peer_graph_us=%.2f "
        "graph_speedup=%.2f peer_vs_nccl_mismatches=%lld\n",
        static_cast<long long>(bytes), ne, pe, ng, pg, ng / pg, static_cast<long long>(mismatches));
    std::fflush(stdout);
  }
  on_ranks(o.gpus, [&](int r) {
    const size_t ri = static_cast<size_t>(r);
    cudaFree(bufs[ri]);
    cudaFree(check[ri]);
    cudaStreamDestroy(streams[ri]);
  });
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const char* v = argv[i + 1];
    if (a == "--gpus") o.gpus = std::atoi(v);
    else if (a == "--calls") o.calls = std::atoi(v);
    else if (a == "--replays") o.replays = std::atoi(v);
    else if (a == "--reps") o.reps = std::atoi(v);
    else if (a == "--sizes") o.sizes = parse_sizes(v);
    else if (a == "--dtype") o.dtype = std::strcmp(v, "f32") == 0 ? DType::F32 : std::strcmp(v, "f16") == 0 ? DType::F16 : DType::BF16;
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (o.gpus < 2 || cuda::visible_gpus() < o.gpus) {
    std::fprintf(stderr, "needs %d GPUs, %d visible\n", o.gpus, cuda::visible_gpus());
    return 1;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

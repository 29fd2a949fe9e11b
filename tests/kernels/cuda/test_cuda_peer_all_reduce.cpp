// PeerAllReduce (kernels/cuda/core/peer_all_reduce.h) against the naive host reference
// (naive_all_reduce_sum: f32 sum in rank order, one rounding): every rank's result equals it bit for
// bit, for sizes 1..1M elements of f32 / bf16 / f16, aligned and not, eager calls launched from one
// host thread, calls from one thread per rank, and a captured CUDA graph replayed many times on new
// inputs (the device-side counter). PeerOrNcclCommunicator routes small messages to it and large
// ones to NCCL. Skip below two GPUs or without peer access (and without NCCL for the router).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/core/thread_communicator.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/nccl_communicator.h"
#include "kernels/cuda/core/peer_all_reduce.h"
#include "kernels/cuda/core/peer_or_nccl_communicator.h"
#include "tests/support/gpu_test.h"

namespace vlm {
namespace {

std::vector<int> all_devices() {
  std::vector<int> d;
  for (int r = 0; r < std::min(cuda::visible_gpus(), cuda::PeerAllReduce::kMaxRanks); ++r) d.push_back(r);
  return d;
}

#define VLM_REQUIRE_PEER_GPUS()                                                                   \
  do {                                                                                            \
    VLM_REQUIRE_GPU();                                                                            \
    if (cuda::visible_gpus() < 2) GTEST_SKIP() << "a peer all-reduce needs two GPUs";             \
    std::string why_;                                                                             \
    if (!cuda::peer_access_possible(all_devices(), &why_)) GTEST_SKIP() << "no peer access: " << why_; \
  } while (0)

// Rank r's input [count] of dt: normal values from seed + r.
std::vector<std::vector<char>> random_inputs(int n, int64_t count, DType dt, uint32_t seed) {
  std::vector<std::vector<char>> in(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    std::mt19937 rng(seed + static_cast<uint32_t>(r));
    std::normal_distribution<float> d;
    std::vector<float> v(static_cast<size_t>(count));
    for (float& x : v) x = d(rng);
    in[static_cast<size_t>(r)].resize(static_cast<size_t>(count) * dtype_size(dt));
    convert_from_f32(v.data(), dt, in[static_cast<size_t>(r)].data(), count);
  }
  return in;
}

// The reference: every rank's buffer after naive_all_reduce_sum (all the same).
std::vector<char> reference(std::vector<std::vector<char>> in, int64_t count, DType dt) {
  std::vector<void*> ptrs;
  for (auto& b : in) ptrs.push_back(b.data());
  naive_all_reduce_sum(ptrs, count, dt);
  return in[0];
}

// Per rank: a non-blocking stream and a device buffer of `bytes` + 16 (room for a misaligned start).
struct Ranks {
  Ranks(int n, size_t bytes) {
    for (int r = 0; r < n; ++r) {
      VLM_CUDA_CHECK(cudaSetDevice(r));
      cudaStream_t s = nullptr;
      VLM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      streams.push_back(s);
      void* d = nullptr;
      VLM_CUDA_CHECK(cudaMalloc(&d, bytes + 16));
      bufs.push_back(static_cast<char*>(d));
    }
  }
  ~Ranks() {
    for (size_t r = 0; r < bufs.size(); ++r) {
      cudaSetDevice(static_cast<int>(r));
      cudaStreamSynchronize(streams[r]);
      cudaFree(bufs[r]);
      cudaStreamDestroy(streams[r]);
    }
    cudaSetDevice(0);
  }
  std::vector<cudaStream_t> streams;
  std::vector<char*> bufs;
};

// Uploads each rank's input at bufs[r] + offset, all-reduces (every launch from this thread) and
// returns every rank's result.
std::vector<std::vector<char>> run_eager(cuda::PeerAllReduce& peer, Ranks& ranks, const std::vector<std::vector<char>>& in,
                                         int64_t count, DType dt, size_t offset) {
  const int n = peer.size();
  for (int r = 0; r < n; ++r) {
    const size_t ri = static_cast<size_t>(r);
    VLM_CUDA_CHECK(cudaSetDevice(r));
    VLM_CUDA_CHECK(cudaMemcpyAsync(ranks.bufs[ri] + offset, in[ri].data(), in[ri].size(), cudaMemcpyHostToDevice, ranks.streams[ri]));
    peer.all_reduce_sum(r, ranks.bufs[ri] + offset, count, dt, ranks.streams[ri]);
  }
  std::vector<std::vector<char>> out(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const size_t ri = static_cast<size_t>(r);
    VLM_CUDA_CHECK(cudaSetDevice(r));
    out[ri].resize(in[ri].size());
    VLM_CUDA_CHECK(cudaMemcpyAsync(out[ri].data(), ranks.bufs[ri] + offset, out[ri].size(), cudaMemcpyDeviceToHost, ranks.streams[ri]));
    VLM_CUDA_CHECK(cudaStreamSynchronize(ranks.streams[ri]));
  }
  VLM_CUDA_CHECK(cudaSetDevice(0));
  return out;
}

// Count of elements of `want` where `got` differs in its bits.
int64_t bit_mismatches(const std::vector<char>& got, const std::vector<char>& want, DType dt) {
  const size_t es = dtype_size(dt);
  int64_t bad = 0;
  for (size_t i = 0; i + es <= want.size(); i += es) bad += std::memcmp(got.data() + i, want.data() + i, es) != 0;
  return bad;
}

TEST(PeerAllReduce, EqualsTheNaiveSumBitForBitForEverySizeAndDtype) {
  VLM_REQUIRE_PEER_GPUS();
  const std::vector<int> devs = all_devices();
  const int n = static_cast<int>(devs.size());
  const int64_t max_count = int64_t{1} << 20;
  cuda::PeerAllReduce peer(devs, static_cast<size_t>(max_count) * 4);
  Ranks ranks(n, static_cast<size_t>(max_count) * 4);
  // One group for every call: the counters advance through grids of 1..64 blocks.
  const std::vector<int64_t> counts = {1, 2, 7, 8, 9, 255, 4096, 4097, 8191, 65539, 262144, 300001, max_count};
  uint32_t seed = 1;
  for (int rep = 0; rep < 2; ++rep)
    for (DType dt : {DType::F32, DType::BF16, DType::F16})
      for (int64_t count : counts)
        for (size_t offset : {size_t{0}, dtype_size(dt)}) {  // aligned, then misaligned by one element
          const auto in = random_inputs(n, count, dt, seed += 16);
          const std::vector<char> want = reference(in, count, dt);
          const auto got = run_eager(peer, ranks, in, count, dt, offset);
          for (int r = 0; r < n; ++r)
            ASSERT_EQ(bit_mismatches(got[static_cast<size_t>(r)], want, dt), 0)
                << dtype_name(dt) << " count " << count << " offset " << offset << " rank " << r << " of " << n
                << " rep " << rep;
        }
}

TEST(PeerAllReduce, RefusesWhatItDoesNotTake) {
  VLM_REQUIRE_PEER_GPUS();
  cuda::PeerAllReduce peer(all_devices(), 1000);
  EXPECT_EQ(peer.capacity_bytes(), 1008u);
  EXPECT_TRUE(peer.accepts(252, DType::F32));
  EXPECT_FALSE(peer.accepts(253, DType::F32));
  EXPECT_TRUE(peer.accepts(504, DType::BF16));
  EXPECT_FALSE(peer.accepts(10, DType::I32));
  EXPECT_THROW(peer.all_reduce_sum(0, nullptr, 253, DType::F32, nullptr), InternalError);
  EXPECT_FALSE(cuda::peer_access_possible({0}));
}

TEST(PeerAllReduce, ACapturedGraphReplayedManyTimesOnNewInputs) {
  VLM_REQUIRE_PEER_GPUS();
  const std::vector<int> devs = all_devices();
  const int n = static_cast<int>(devs.size());
  const int64_t count_a = 3584, count_b = 70001;  // two all-reduces of different grids in one graph
  const DType dt = DType::BF16;
  const size_t bytes_a = static_cast<size_t>(count_a) * 2, bytes_b = static_cast<size_t>(count_b) * 2;
  cuda::PeerAllReduce peer(devs, bytes_b);
  Ranks a(n, bytes_a), b(n, bytes_b), src(n, bytes_a + bytes_b);
  std::vector<cudaGraphExec_t> execs(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {  // graph of rank r: inputs from src, then the two all-reduces
    const size_t ri = static_cast<size_t>(r);
    VLM_CUDA_CHECK(cudaSetDevice(r));
    cudaStream_t s = a.streams[ri];
    cudaGraph_t g = nullptr;
    VLM_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    VLM_CUDA_CHECK(cudaMemcpyAsync(a.bufs[ri], src.bufs[ri], bytes_a, cudaMemcpyDeviceToDevice, s));
    VLM_CUDA_CHECK(cudaMemcpyAsync(b.bufs[ri], src.bufs[ri] + bytes_a, bytes_b, cudaMemcpyDeviceToDevice, s));
    peer.all_reduce_sum(r, a.bufs[ri], count_a, dt, s);
    peer.all_reduce_sum(r, b.bufs[ri], count_b, dt, s);
    VLM_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    VLM_CUDA_CHECK(cudaGraphInstantiate(&execs[ri], g, 0));
    VLM_CUDA_CHECK(cudaGraphDestroy(g));
  }
  for (int rep = 0; rep < 60; ++rep) {
    const auto in_a = random_inputs(n, count_a, dt, 1000u + 64u * static_cast<uint32_t>(rep));
    const auto in_b = random_inputs(n, count_b, dt, 5000u + 64u * static_cast<uint32_t>(rep));
    const std::vector<char> want_a = reference(in_a, count_a, dt), want_b = reference(in_b, count_b, dt);
    for (int r = 0; r < n; ++r) {  // new inputs, then every rank's replay, from this thread
      const size_t ri = static_cast<size_t>(r);
      VLM_CUDA_CHECK(cudaSetDevice(r));
      VLM_CUDA_CHECK(cudaMemcpyAsync(src.bufs[ri], in_a[ri].data(), bytes_a, cudaMemcpyHostToDevice, a.streams[ri]));
      VLM_CUDA_CHECK(cudaMemcpyAsync(src.bufs[ri] + bytes_a, in_b[ri].data(), bytes_b, cudaMemcpyHostToDevice, a.streams[ri]));
      VLM_CUDA_CHECK(cudaGraphLaunch(execs[ri], a.streams[ri]));
      if (rep % 7 == 3) peer.all_reduce_sum(r, b.bufs[ri], 9, DType::F32, a.streams[ri]);  // an eager call between replays
    }
    for (int r = 0; r < n; ++r) {
      const size_t ri = static_cast<size_t>(r);
      VLM_CUDA_CHECK(cudaSetDevice(r));
      std::vector<char> got_a(bytes_a), got_b(bytes_b);
      VLM_CUDA_CHECK(cudaMemcpyAsync(got_a.data(), a.bufs[ri], bytes_a, cudaMemcpyDeviceToHost, a.streams[ri]));
      VLM_CUDA_CHECK(cudaMemcpyAsync(got_b.data(), b.bufs[ri], bytes_b, cudaMemcpyDeviceToHost, a.streams[ri]));
      VLM_CUDA_CHECK(cudaStreamSynchronize(a.streams[ri]));
      ASSERT_EQ(bit_mismatches(got_a, want_a, dt), 0) << "replay " << rep << " rank " << r;
      if (rep % 7 != 3) {  // (else the eager call overwrote b's head)
        ASSERT_EQ(bit_mismatches(got_b, want_b, dt), 0) << "replay " << rep << " rank " << r;
      }
    }
  }
  for (int r = 0; r < n; ++r) {
    VLM_CUDA_CHECK(cudaSetDevice(r));
    cudaGraphExecDestroy(execs[static_cast<size_t>(r)]);
  }
  VLM_CUDA_CHECK(cudaSetDevice(0));
}

TEST(PeerAllReduce, OneHostThreadPerRankManyCalls) {
  VLM_REQUIRE_PEER_GPUS();
  const std::vector<int> devs = all_devices();
  const int n = static_cast<int>(devs.size());
  const std::vector<int64_t> counts = {1, 3584, 8192, 70000, 5, 262144};
  const std::vector<DType> dts = {DType::BF16, DType::F32, DType::F16};
  const int calls = 48;
  std::vector<std::vector<std::vector<char>>> in;  // [call][rank]
  std::vector<std::vector<char>> want;            // [call]
  for (int c = 0; c < calls; ++c) {
    const int64_t count = counts[static_cast<size_t>(c) % counts.size()];
    const DType dt = dts[static_cast<size_t>(c) % dts.size()];
    in.push_back(random_inputs(n, count, dt, 77u + 16u * static_cast<uint32_t>(c)));
    want.push_back(reference(in.back(), count, dt));
  }
  cuda::PeerAllReduce peer(devs, 262144 * 4);
  std::vector<int64_t> bad(static_cast<size_t>(n), 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      const size_t ri = static_cast<size_t>(r);
      VLM_CUDA_CHECK(cudaSetDevice(r));
      cudaStream_t s = nullptr;
      void* d = nullptr;
      VLM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      VLM_CUDA_CHECK(cudaMalloc(&d, 262144 * 4));
      for (int c = 0; c < calls; ++c) {
        const size_t ci = static_cast<size_t>(c);
        const DType dt = dts[ci % dts.size()];
        VLM_CUDA_CHECK(cudaMemcpyAsync(d, in[ci][ri].data(), in[ci][ri].size(), cudaMemcpyHostToDevice, s));
        peer.all_reduce_sum(r, d, counts[ci % counts.size()], dt, s);
        std::vector<char> got(in[ci][ri].size());
        VLM_CUDA_CHECK(cudaMemcpyAsync(got.data(), d, got.size(), cudaMemcpyDeviceToHost, s));
        VLM_CUDA_CHECK(cudaStreamSynchronize(s));
        bad[ri] += bit_mismatches(got, want[ci], dt);
      }
      cudaFree(d);
      cudaStreamDestroy(s);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(bad[static_cast<size_t>(r)], 0) << "rank " << r;
}

TEST(PeerOrNcclCommunicator, SmallMessagesGoPeerLargeOnesNccl) {
  VLM_REQUIRE_PEER_GPUS();
  std::string why;
  if (cuda::nccl_api(&why) == nullptr) GTEST_SKIP() << "NCCL not found: " << why;
  const std::vector<int> devs = all_devices();
  const int n = static_cast<int>(devs.size());
  auto group = std::make_shared<cuda::NcclGroup>(devs);
  cuda::AllReduceChoice choice;
  choice.max_bytes = 64 * 1024;
  auto peer = cuda::make_peer_all_reduce(devs, choice);
  ASSERT_NE(peer, nullptr);
  const DType dt = DType::BF16;
  const int64_t small = 32 * 1024, large = 100000;  // 64 KiB: peer; 200 KB: NCCL
  const auto in_s = random_inputs(n, small, dt, 9), in_l = random_inputs(n, large, dt, 99);
  const std::vector<char> want_s = reference(in_s, small, dt), want_l = reference(in_l, large, dt);
  std::vector<std::vector<char>> got_s(static_cast<size_t>(n)), got_l(static_cast<size_t>(n));
  std::vector<int64_t> peer_calls(static_cast<size_t>(n)), nccl_calls(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      const size_t ri = static_cast<size_t>(r);
      VLM_CUDA_CHECK(cudaSetDevice(r));
      cuda::PeerOrNcclCommunicator comm(std::make_unique<cuda::NcclCommunicator>(group, r), peer);
      cudaStream_t s = nullptr;
      void* d = nullptr;
      VLM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      VLM_CUDA_CHECK(cudaMalloc(&d, static_cast<size_t>(large) * 2));
      for (int which = 0; which < 2; ++which) {
        const auto& in = which == 0 ? in_s : in_l;
        auto& got = which == 0 ? got_s : got_l;
        VLM_CUDA_CHECK(cudaMemcpyAsync(d, in[ri].data(), in[ri].size(), cudaMemcpyHostToDevice, s));
        comm.all_reduce_sum(d, which == 0 ? small : large, dt, s);
        got[ri].resize(in[ri].size());
        VLM_CUDA_CHECK(cudaMemcpyAsync(got[ri].data(), d, got[ri].size(), cudaMemcpyDeviceToHost, s));
        VLM_CUDA_CHECK(cudaStreamSynchronize(s));
      }
      peer_calls[ri] = comm.peer_calls();
      nccl_calls[ri] = comm.nccl_calls();
      cudaFree(d);
      cudaStreamDestroy(s);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    const size_t ri = static_cast<size_t>(r);
    EXPECT_EQ(peer_calls[ri], 1);
    EXPECT_EQ(nccl_calls[ri], 1);
    EXPECT_EQ(bit_mismatches(got_s[ri], want_s, dt), 0) << "rank " << r;
    double worst = 0;  // NCCL's order: exact for two ranks, within a few bf16 roundings for more
    for (int64_t i = 0; i < large; ++i) {
      const double g = load_as_f32(got_l[ri].data(), dt, i), w = load_as_f32(want_l.data(), dt, i);
      worst = std::max(worst, std::abs(g - w) / (std::abs(w) + 1e-3));
    }
    EXPECT_LE(worst, n == 2 ? 0.0 : 2e-2) << "rank " << r;
  }
}

// Sets an environment variable for one scope, then restores it.
struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value, 1);
  }
  ~ScopedEnv() { had_ ? setenv(name_, old_.c_str(), 1) : unsetenv(name_); }
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(PeerOrNcclCommunicator, ChoiceFromTheEnvironment) {
  {
    ScopedEnv m("VLM_TP_ALLREDUCE", "");
    ScopedEnv b("VLM_TP_ALLREDUCE_MAX_BYTES", "");
    const cuda::AllReduceChoice c = cuda::all_reduce_choice_from_env();
    EXPECT_EQ(c.mode, cuda::AllReduceMode::kAuto);
    EXPECT_EQ(c.max_bytes, size_t{1} << 20);
  }
  {
    ScopedEnv m("VLM_TP_ALLREDUCE", "nccl");
    ScopedEnv b("VLM_TP_ALLREDUCE_MAX_BYTES", "4096");
    const cuda::AllReduceChoice c = cuda::all_reduce_choice_from_env();
    EXPECT_EQ(c.mode, cuda::AllReduceMode::kNccl);
    EXPECT_EQ(c.max_bytes, 4096u);
    EXPECT_EQ(cuda::make_peer_all_reduce({0, 1}, c), nullptr);  // nccl: no peer all-reduce, nothing touched
  }
  {
    ScopedEnv m("VLM_TP_ALLREDUCE", "peer");
    EXPECT_EQ(cuda::all_reduce_choice_from_env().mode, cuda::AllReduceMode::kPeer);
  }
  {
    ScopedEnv m("VLM_TP_ALLREDUCE", "fast");
    EXPECT_THROW(cuda::all_reduce_choice_from_env(), LoadError);
  }
  {
    ScopedEnv b("VLM_TP_ALLREDUCE_MAX_BYTES", "1M");
    EXPECT_THROW(cuda::all_reduce_choice_from_env(), LoadError);
  }
}

}  // namespace
}  // namespace vlm

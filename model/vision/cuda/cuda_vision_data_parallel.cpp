#include "model/vision/cuda/cuda_vision_data_parallel.h"

#include <algorithm>
#include <exception>
#include <future>

#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"
#include "model/vision/vision_device_split.h"

namespace vlm {

CudaVisionDataParallel::CudaVisionDataParallel(std::vector<int> devices,
                                               std::vector<std::unique_ptr<CudaVisionTower>> towers) {
  VLM_CHECK(!devices.empty() && devices.size() == towers.size(), "{} devices for {} towers", devices.size(),
            towers.size());
  const cuda::CudaDeviceGuard restore;
  replicas_.reserve(devices.size());
  VLM_CHECK(!towers.empty() && towers.size() == devices.size() && towers[0] != nullptr, "{} towers for {} devices",
            towers.size(), devices.size());
  // The first tower's figures, read before the loop moves it into its replica.
  const int64_t cost0 = towers[0]->reserved_cost(), features0 = towers[0]->out_features();
  for (size_t i = 0; i < devices.size(); ++i) {  // every check before anything is made
    VLM_CHECK(towers[i] != nullptr, "no tower for device {}", devices[i]);
    VLM_CHECK(std::count(devices.begin(), devices.end(), devices[i]) == 1, "device {} listed twice", devices[i]);
    VLM_CHECK(towers[i]->device() == devices[i], "the tower for device {} was built on device {}", devices[i],
              towers[i]->device());
    VLM_CHECK(towers[i]->reserved_cost() == cost0 && towers[i]->out_features() == features0,
              "the towers differ: reserved {} and {}, {} and {} features", towers[i]->reserved_cost(), cost0,
              towers[i]->out_features(), features0);
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    VLM_CUDA_CHECK(cudaSetDevice(devices[i]));
    Replica r;
    r.device = devices[i];
    r.tower = std::move(towers[i]);
    VLM_CUDA_CHECK(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking));
    replicas_.push_back(std::move(r));  // r.done: an event of this device
  }
  for (const Replica& a : replicas_)
    for (const Replica& b : replicas_)
      if (a.device != b.device) enable_peer(a.device, b.device);
}

CudaVisionDataParallel::~CudaVisionDataParallel() {
  const cuda::CudaDeviceGuard restore;
  for (auto& [device, event] : pulled_) {
    cudaSetDevice(device);
    event->synchronize_quietly();  // the copies out of the staging buffers
    event.reset();
  }
  for (Replica& r : replicas_) {
    cudaSetDevice(r.device);
    if (r.stream) {
      cudaStreamSynchronize(r.stream);
      cudaStreamDestroy(r.stream);
    }
    r.tower.reset();  // its streams, events and buffers on its device
    r.staging.reset();
    const cuda::CudaEvent gone = std::move(r.done);  // destroyed here, its device current
  }
  replicas_.clear();
}

void CudaVisionDataParallel::enable_peer(int a, int b) {
  if (a == b || !peers_.insert({a, b}).second) return;
  int can = 0;
  VLM_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a, b));
  if (!can) return;  // cudaMemcpyPeerAsync stages through the host
  const cuda::CudaDeviceGuard restore;
  VLM_CUDA_CHECK(cudaSetDevice(a));
  const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();  // enabled elsewhere (the decoder's NCCL)
  else VLM_CUDA_CHECK(e);
}

std::vector<size_t> CudaVisionDataParallel::assignment(std::span<const FrameSlice> slices) const {
  const CudaVisionTower& t = *replicas_[0].tower;
  std::vector<int64_t> costs;
  for (const std::vector<FrameSlice>& unit : t.frame_groups(slices)) {
    int64_t c = 0;
    for (const FrameSlice& f : unit) c += t.cost(*f.item) / item_frames(*f.item) * (f.t1 - f.t0);
    costs.push_back(c);
  }
  return split_units_over_devices(costs, size());
}

void CudaVisionDataParallel::encode_call(std::span<const FrameSlice> slices, std::span<const VisionDestination> dests,
                                         cuda::GpuIntervalTimer* timer) {
  VLM_CHECK(!dests.empty(), "no destination for the media rows");
  for (size_t k = 0; k < dests.size(); ++k)
    for (size_t j = 0; j < k; ++j)
      VLM_CHECK(dests[j].device != dests[k].device, "two destinations on device {}", dests[k].device);
  const cuda::CudaDeviceGuard restore;
  const CudaVisionTower& t0 = *replicas_[0].tower;
  const int64_t C = t0.out_features();
  // The units, their rows, and each replica's contiguous run of them.
  const std::vector<std::vector<FrameSlice>> units = t0.frame_groups(slices);
  std::vector<int64_t> costs, row_at(1, 0);  // row_at[u]: the first row of unit u
  for (const std::vector<FrameSlice>& unit : units) {
    int64_t c = 0, rows = 0;
    for (const FrameSlice& f : unit) {
      const int32_t F = item_frames(*f.item);
      c += t0.cost(*f.item) / F * (f.t1 - f.t0);
      rows += t0.out_rows(*f.item) / F * (f.t1 - f.t0);
    }
    costs.push_back(c);
    row_at.push_back(row_at.back() + rows);
  }
  const std::vector<size_t> b = split_units_over_devices(costs, size());
  // The destination on a device, or -1.
  auto dest_on = [&](int device) {
    for (size_t k = 0; k < dests.size(); ++k)
      if (dests[k].device == device) return static_cast<int>(k);
    return -1;
  };
  for (const VisionDestination& d : dests)
    for (const Replica& r : replicas_) {
      enable_peer(d.device, r.device);
      enable_peer(r.device, d.device);
    }
  // Each replica's run, on its stream: into its device's destination, else its staging buffer
  // (reused after the previous call's copies out of it: pulled_). The first busy replica is
  // enqueued from this thread, the others each from a thread of its own, so the host's share of
  // their calls (pixels converted into pinned staging) runs side by side; joined before the
  // destinations' waits (host work only: no GPU sync).
  std::vector<float*> src(replicas_.size(), nullptr);  // where replica i's rows are
  for (size_t i = 0; i < replicas_.size(); ++i) {
    if (b[i] == b[i + 1]) continue;
    const int k = dest_on(replicas_[i].device);
    const int64_t row0 = row_at[b[i]], rows = row_at[b[i + 1]] - row0;
    if (k >= 0) {
      src[i] = dests[static_cast<size_t>(k)].out + row0 * C;
      continue;
    }
    Replica& r = replicas_[i];
    const auto bytes = static_cast<size_t>(rows * C) * 4;
    if (bytes > r.staging.bytes()) {  // rare: the old buffer may be read by copies in flight
      for (auto& p : pulled_) VLM_CUDA_CHECK(cudaEventSynchronize(*p.second));
      VLM_CUDA_CHECK(cudaSetDevice(r.device));
      r.staging.grow(bytes);
    }
    src[i] = r.staging.as<float>();
  }
  auto launch = [&](size_t i) {
    Replica& r = replicas_[i];
    VLM_CUDA_CHECK(cudaSetDevice(r.device));
    if (dest_on(r.device) < 0)
      for (auto& p : pulled_) VLM_CUDA_CHECK(cudaStreamWaitEvent(r.stream, *p.second));
    std::vector<FrameSlice> run;
    for (size_t u = b[i]; u < b[i + 1]; ++u) run.insert(run.end(), units[u].begin(), units[u].end());
    const bool timed = timer && i == 0;
    if (timed) timer->begin(r.stream);
    r.tower->encode_frames(run, src[i], r.stream);
    if (timed) timer->end(r.stream);
    VLM_CUDA_CHECK(cudaEventRecord(r.done, r.stream));
  };
  std::vector<std::future<void>> others;
  size_t first = replicas_.size();
  for (size_t i = 0; i < replicas_.size(); ++i) {
    if (!src[i]) continue;
    if (first == replicas_.size()) first = i;
    else others.push_back(std::async(std::launch::async, launch, i));
  }
  std::exception_ptr failed;
  if (first < replicas_.size()) {
    try {
      launch(first);
    } catch (...) {
      failed = std::current_exception();
    }
  }
  for (std::future<void>& f : others) {
    try {
      f.get();
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  }
  if (failed) std::rethrow_exception(failed);
  // Every destination waits for each replica's rows and pulls those it lacks, on its stream.
  for (const VisionDestination& d : dests) {
    VLM_CUDA_CHECK(cudaSetDevice(d.device));
    for (size_t i = 0; i < replicas_.size(); ++i) {
      if (!src[i]) continue;
      const Replica& r = replicas_[i];
      VLM_CUDA_CHECK(cudaStreamWaitEvent(d.stream, r.done));
      if (r.device == d.device) continue;  // encoded in place
      const int64_t row0 = row_at[b[i]], rows = row_at[b[i + 1]] - row0;
      VLM_CUDA_CHECK(cudaMemcpyPeerAsync(d.out + row0 * C, d.device, src[i], r.device,
                                         static_cast<size_t>(rows * C) * 4, d.stream));
    }
    auto it = std::find_if(pulled_.begin(), pulled_.end(), [&](const auto& p) { return p.first == d.device; });
    if (it == pulled_.end()) {
      pulled_.emplace_back(d.device, std::make_unique<cuda::CudaEvent>());  // on d.device
      it = std::prev(pulled_.end());
    }
    VLM_CUDA_CHECK(cudaEventRecord(*it->second, d.stream));
  }
}

}  // namespace vlm

// CudaVisionDataParallel: one vision tower per device (issue 42, vLLM's --mm-encoder-tp-mode
// data): a tower call's units (CudaVisionTower::frame_groups: Qwen2-VL's groups of whole frames,
// or whole items) are split into contiguous runs balancing patches (split_units_over_devices),
// each device encodes its run on its own stream concurrently, and every destination (a device, an
// output allocation there, a stream there) receives all the rows, in the call's order, by peer
// copies on its own stream after waiting on the encoding devices' events: no host sync in the
// steady path. On a tower that splits frames a device runs exactly the groups the one-device call
// would (same layouts, same GEMM shapes, same kernels), so the rows have the same bits as
// tower.encode_frames(slices) on one device; on a tower of whole items (LLaVA, OneVision,
// Qwen3-VL) items are spread and rows match to the GEMMs' rounding.
//
// Ownership and devices: replica i is (devices[i], towers[i]): the tower built (weights uploaded)
// and reserved with devices[i] current, alike on every device (same weights, dtype, reservation,
// group_patches); this object owns the towers, one stream per device (non-blocking, created on
// it) that the tower only ever runs on, an event per device, and per device a staging buffer for
// the rows of a device that is no destination (grown on demand). Peer access is enabled between
// every pair of devices (encoders and destinations) that cudaDeviceCanAccessPeer allows (else
// the runtime stages peer copies through the host). Every call sets the device it works on and
// restores the caller's. Not thread-safe: one caller at a time (the media encoder's lazy rows
// lock around it).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "kernels/cuda/core/cuda_device_guard.h"
#include "kernels/cuda/core/cuda_event.h"
#include "kernels/cuda/core/device_buffer.h"
#include "kernels/cuda/core/gpu_interval_timer.h"
#include "model/vision/cuda/cuda_vision_tower.h"

namespace vlm {

// Where a call's rows go: out [rows, C] f32 on `device`, valid in `stream`'s order (a stream of
// that device) once encode_call returns (the copies and waits are enqueued on it).
struct VisionDestination {
  int device = 0;
  float* out = nullptr;
  cudaStream_t stream = nullptr;
};

class CudaVisionDataParallel {
 public:
  // towers[i] lives on devices[i] (towers[i]->device(); distinct devices, at least one; see the
  // header's contract). InternalError when a tower was built on another device.
  CudaVisionDataParallel(std::vector<int> devices, std::vector<std::unique_ptr<CudaVisionTower>> towers);
  ~CudaVisionDataParallel();  // waits for the streams, then frees on each device
  CudaVisionDataParallel(const CudaVisionDataParallel&) = delete;
  CudaVisionDataParallel& operator=(const CudaVisionDataParallel&) = delete;

  int size() const { return static_cast<int>(replicas_.size()); }
  int device(int i) const { return replicas_[static_cast<size_t>(i)].device; }
  CudaVisionTower& tower(int i) { return *replicas_[static_cast<size_t>(i)].tower; }
  const CudaVisionTower& tower(int i) const { return *replicas_[static_cast<size_t>(i)].tower; }

  // One tower call's slices (total cost <= reserved_cost(); on a tower of whole items, whole
  // items) -> [their rows, C] f32 at every destination's out, slice after slice as
  // tower(0).encode_frames(slices) writes them; destinations on distinct devices. timer (may be
  // null): an interval around replica 0's share, on its stream. The slices' items must stay alive
  // until the rows are ready (pageable pixels are read before the call returns; Frames8 items'
  // frames on the copy stream).
  void encode_call(std::span<const FrameSlice> slices, std::span<const VisionDestination> dests,
                   cuda::GpuIntervalTimer* timer = nullptr);
  // Which replica encodes which of a call's units (tests): the first unit index of each replica's
  // run and the end, size() + 1 entries.
  std::vector<size_t> assignment(std::span<const FrameSlice> slices) const;

 private:
  struct Replica {
    int device = 0;
    std::unique_ptr<CudaVisionTower> tower;
    cudaStream_t stream = nullptr;
    cuda::CudaEvent done;    // its share of the last call encoded (recorded on stream)
    cuda::DeviceBuffer staging;  // its rows when it is no destination
  };
  void enable_peer(int a, int b);

  std::vector<Replica> replicas_;
  // Per destination device: the event recorded after its last call's copies (staging is reused
  // only after them).
  std::vector<std::pair<int, std::unique_ptr<cuda::CudaEvent>>> pulled_;
  std::set<std::pair<int, int>> peers_;  // pairs (a, b) whose peer access was tried
};

}  // namespace vlm

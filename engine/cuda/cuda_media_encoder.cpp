#include "engine/cuda/cuda_media_encoder.h"

#include <fmt/format.h>

#include <string>
#include <variant>

#include "kernels/core/check.h"
#include "kernels/core/log.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/device_buffer.h"
#include "kernels/cuda/core/gpu_interval_timer.h"
#include "model/vision/cuda/cuda_llava_vision_runner.h"
#include "model/vision/cuda/cuda_onevision_vision_runner.h"
#include "model/vision/cuda/cuda_qwen2_vision_runner.h"
#include "model/vision/cuda/cuda_qwen3_vl_vision_runner.h"

namespace vlm {

namespace {

struct GpuEmbeddings : DeviceEmbeddings {
  cuda::DeviceBuffer buf;
};

// Rows encoded on demand: units of whole frames, in row order, each encoded (on s) the first time
// ensure_rows asks for one of its rows.
struct LazyGpuEmbeddings : GpuEmbeddings {
  struct Unit {
    std::vector<FrameSlice> slices;
    int64_t row0 = 0, row1 = 0;  // its rows
    mutable bool done = false;
  };
  CudaVisionTower* tower = nullptr;
  std::shared_ptr<cuda::GpuIntervalTimer> timer;  // the encoder's (debug timeline)
  cudaStream_t stream = nullptr;
  int64_t C = 0;
  std::vector<Unit> units;
  std::vector<std::shared_ptr<const void>> owners;  // keep the slices' items alive

  void ensure_rows(int64_t begin, int64_t end) const override {
    VLM_CHECK(0 <= begin && end <= rows, "media rows {}..{} of {}", begin, end, rows);
    const cuda::CudaDeviceGuard on(tower->device());  // the timer's events and the caller's stream are there
    for (const Unit& u : units)
      if (!u.done && u.row0 < end && begin < u.row1) {
        timer->begin(stream);
        tower->encode_frames(u.slices, buf.as<float>() + u.row0 * C, stream);
        timer->end(stream);
        u.done = true;
      }
  }
};

// A data-parallel encode's rows, one allocation per destination, encoded call by call (the
// one-device encoder's tower calls: eager calls of whole items, or units of whole frames, each
// when first asked for), every call over all the devices and copied to every destination.
struct DataParallelRows {
  struct Call {
    std::vector<FrameSlice> slices;
    int64_t row0 = 0, row1 = 0;  // its rows
    bool done = false;
  };
  CudaVisionDataParallel* dp = nullptr;
  std::shared_ptr<std::mutex> mu;                 // the encoder's: around dp's calls
  std::shared_ptr<cuda::GpuIntervalTimer> timer;  // the encoder's (debug timeline)
  std::vector<CudaMediaEncoder::Destination> dests;
  std::vector<cuda::DeviceBuffer> bufs;  // [rows, C] f32 on dests[k].device
  int64_t rows = 0, C = 0;
  std::vector<Call> calls;
  std::vector<std::shared_ptr<const void>> owners;  // keep the slices' items alive

  void ensure(int64_t begin, int64_t end) {
    VLM_CHECK(0 <= begin && end <= rows, "media rows {}..{} of {}", begin, end, rows);
    const std::lock_guard<std::mutex> lock(*mu);
    std::vector<VisionDestination> to(dests.size());
    for (Call& c : calls)
      if (!c.done && c.row0 < end && begin < c.row1) {
        for (size_t k = 0; k < dests.size(); ++k)
          to[k] = {dests[k].device, bufs[k].as<float>() + c.row0 * C, dests[k].stream};
        dp->encode_call(c.slices, to, timer.get());
        c.done = true;
      }
  }
};

struct DataParallelEmbeddings : DeviceEmbeddings {
  std::shared_ptr<DataParallelRows> all;
  void ensure_rows(int64_t begin, int64_t end) const override { all->ensure(begin, end); }
};

// The GPU runner of each vision architecture and the cost its reservation counts in (from
// --max-media-patches: encoder rows).
struct RunnerFor {
  DType dt;
  int64_t max_media_patches;
  int64_t* max_cost;
  std::unique_ptr<CudaVisionTower> operator()(const std::monostate&) const { return nullptr; }
  std::unique_ptr<CudaVisionTower> operator()(const LlavaVisionBinding& b) const {
    *max_cost = max_media_patches / b.spec.vision.num_positions();  // images
    return std::make_unique<CudaLlavaVisionRunner>(b.spec, b.tower, b.projector, dt);
  }
  std::unique_ptr<CudaVisionTower> operator()(const OnevisionVisionBinding& b) const {
    *max_cost = max_media_patches / b.spec.llava.vision.num_positions();  // tiles and frames
    return std::make_unique<CudaOnevisionVisionRunner>(b.spec, b.tower, b.projector, b.newline_source, b.newline, dt);
  }
  std::unique_ptr<CudaVisionTower> operator()(const Qwen2VisionBinding& b) const {
    *max_cost = max_media_patches;  // patches
    return std::make_unique<CudaQwen2VisionRunner>(*b.encoder, dt);
  }
  // Rows of (1 + K) planes side by side (out_features; DeepStack's planes with the merger's).
  std::unique_ptr<CudaVisionTower> operator()(const Qwen3VLVisionBinding& b) const {
    *max_cost = max_media_patches;  // patches
    return std::make_unique<CudaQwen3VLVisionRunner>(b.config, b.weights, dt);
  }
};

}  // namespace

std::unique_ptr<CudaMediaEncoder> CudaMediaEncoder::make(const Model& model, DType dt, int64_t max_media_patches,
                                                         int64_t step_patches) {
  int64_t max_cost = max_media_patches;
  std::unique_ptr<CudaVisionTower> tower = std::visit(RunnerFor{dt, max_media_patches, &max_cost}, model.vision_binding());
  if (!tower) return nullptr;
  if (max_cost < 1)
    throw LoadError(fmt::format("--max-media-patches {} holds no image of this model", max_media_patches));
  tower->reserve(max_cost);
  VLM_LOG_INFO("GPU: vision encoder {:.2f} GiB of weights, {:.2f} GiB of activations reserved for {} encoder rows "
               "(--max-media-patches) per encoder call; {}",
               static_cast<double>(tower->weight_bytes()) / (1 << 30),
               static_cast<double>(tower->workspace_bytes(max_cost)) / (1 << 30), max_media_patches,
               tower->splits_frames()
                   ? "a longer video encodes in whole-frame groups of at most that, so any video whose single "
                     "frame fits is accepted (Qwen2-VL's 768 frames at its per-frame cap included)"
                   : "a larger image is refused with a 400");
  return std::make_unique<CudaMediaEncoder>(std::move(tower), step_patches);
}

std::unique_ptr<CudaMediaEncoder> CudaMediaEncoder::make(const Model& model, DType dt, int64_t max_media_patches,
                                                         int64_t step_patches, std::span<const int> devices) {
  VLM_CHECK(!devices.empty(), "a data-parallel media encoder over no device");
  std::vector<std::unique_ptr<CudaVisionTower>> towers;
  {
    const cuda::CudaDeviceGuard restore;
    for (int d : devices) {
      VLM_CUDA_CHECK(cudaSetDevice(d));
      std::unique_ptr<CudaMediaEncoder> one = make(model, dt, max_media_patches, step_patches);  // logs per device
      if (!one) return nullptr;
      towers.push_back(std::move(one->tower_));
    }
  }
  VLM_LOG_INFO("GPU: vision encoder data-parallel over {} device(s), a tower on each", devices.size());
  auto dp =
      std::make_unique<CudaVisionDataParallel>(std::vector<int>(devices.begin(), devices.end()), std::move(towers));
  return std::make_unique<CudaMediaEncoder>(std::move(dp), step_patches);
}

void CudaMediaEncoder::check(const MediaPixels& item, int k) const {
  check_vision_fits(tower(), item, k);
}

std::shared_ptr<const DeviceEmbeddings> CudaMediaEncoder::encode(std::span<const MediaPixels* const> items,
                                                                 std::vector<std::shared_ptr<const void>> owners,
                                                                 cudaStream_t s) {
  if (dp_) {
    Destination here{0, s};
    VLM_CUDA_CHECK(cudaGetDevice(&here.device));
    return encode(items, std::move(owners), std::span<const Destination>(&here, 1))[0];
  }
  const cuda::CudaDeviceGuard on(tower_->device());  // s, the rows' allocation and the timer's events there
  int64_t rows = 0, cost = 0;
  for (const MediaPixels* it : items) {
    rows += tower_->out_rows(*it);
    cost += tower_->cost(*it);
  }
  const int64_t C = tower_->out_features();
  // Lazy (a long video under --media-step-patches), or eager in whole-frame groups of at most the
  // reservation when an item alone exceeds it (a splitting tower admits such items: check()).
  bool over = false;
  for (const MediaPixels* it : items) over = over || tower_->cost(*it) > tower_->reserved_cost();
  const bool lazy = step_patches_ > 0 && cost > step_patches_;
  if (tower_->splits_frames() && (lazy || over)) {
    auto e = std::make_shared<LazyGpuEmbeddings>();
    e->buf.resize(static_cast<size_t>(rows * C) * 4);
    e->data = e->buf.as<float>();
    e->rows = rows;
    e->tower = tower_.get();
    e->timer = timer_;
    e->stream = s;
    e->C = C;
    e->owners = std::move(owners);
    // Units of whole frames of at most step_patches_ patches (or one frame; the reservation when
    // eager); contiguous frames of one item are one slice.
    const int64_t limit = lazy ? std::min(step_patches_, tower_->reserved_cost()) : tower_->reserved_cost();
    int64_t unit_cost = 0, row = 0;
    for (const MediaPixels* it : items) {
      const int32_t F = item_frames(*it);
      const int64_t frame_cost = tower_->cost(*it) / F, frame_rows = tower_->out_rows(*it) / F;
      for (int32_t t = 0; t < F; ++t, row += frame_rows) {
        if (e->units.empty() || (unit_cost > 0 && unit_cost + frame_cost > limit)) {
          e->units.push_back({{}, row, row});
          unit_cost = 0;
        }
        e->units.back().row1 = row + frame_rows;
        std::vector<FrameSlice>& sl = e->units.back().slices;
        if (!sl.empty() && sl.back().item == it && sl.back().t1 == t) ++sl.back().t1;
        else sl.push_back({it, t, t + 1});
        unit_cost += frame_cost;
      }
    }
    if (!lazy) e->ensure_rows(0, rows);  // every unit now, in order, as the eager path would
    return e;
  }
  auto e = std::make_shared<GpuEmbeddings>();
  e->buf.resize(static_cast<size_t>(rows * C) * 4);
  e->data = e->buf.as<float>();
  e->rows = rows;
  // Consecutive items in calls of at most the reserved cost.
  size_t i = 0;
  int64_t row = 0;
  while (i < items.size()) {
    size_t j = i;
    int64_t cost = 0, n = 0;
    while (j < items.size() && cost + tower_->cost(*items[j]) <= tower_->reserved_cost()) {
      cost += tower_->cost(*items[j]);
      n += tower_->out_rows(*items[j]);
      ++j;
    }
    VLM_CHECK(j > i, "media item of {} encoder rows > the {} reserved (admission lets none through)",
              tower_->cost(*items[i]), tower_->reserved_cost());
    timer_->begin(s);
    tower_->encode(items.subspan(i, j - i), e->buf.as<float>() + row * C, s);
    timer_->end(s);
    row += n;
    i = j;
  }
  return e;
}

std::vector<std::shared_ptr<const DeviceEmbeddings>> CudaMediaEncoder::encode(
    std::span<const MediaPixels* const> items, std::vector<std::shared_ptr<const void>> owners,
    std::span<const Destination> dests) {
  VLM_CHECK(dp_ != nullptr, "encode to destinations needs the data-parallel encoder (make with devices)");
  VLM_CHECK(!dests.empty(), "no destination for the media rows");
  const CudaVisionTower& t = tower();
  auto all = std::make_shared<DataParallelRows>();
  int64_t cost = 0;
  bool over = false;
  for (const MediaPixels* it : items) {
    all->rows += t.out_rows(*it);
    cost += t.cost(*it);
    over = over || t.cost(*it) > t.reserved_cost();
  }
  all->dp = dp_.get();
  all->mu = dp_mu_;
  all->timer = timer_;
  all->dests.assign(dests.begin(), dests.end());
  all->C = t.out_features();
  all->owners = std::move(owners);
  {
    const cuda::CudaDeviceGuard restore;
    for (const Destination& d : dests) {
      VLM_CUDA_CHECK(cudaSetDevice(d.device));
      all->bufs.emplace_back(static_cast<size_t>(all->rows * all->C) * 4);
    }
  }
  // The one-device encoder's tower calls (encode() above), so each is split over the devices
  // alike: lazy or over-reservation items in units of whole frames, else whole items in calls of
  // at most the reservation.
  bool lazy = step_patches_ > 0 && cost > step_patches_;
  if (t.splits_frames() && (lazy || over)) {
    const int64_t limit = lazy ? std::min(step_patches_, t.reserved_cost()) : t.reserved_cost();
    int64_t unit_cost = 0, row = 0;
    for (const MediaPixels* it : items) {
      const int32_t F = item_frames(*it);
      const int64_t frame_cost = t.cost(*it) / F, frame_rows = t.out_rows(*it) / F;
      for (int32_t f = 0; f < F; ++f, row += frame_rows) {
        if (all->calls.empty() || (unit_cost > 0 && unit_cost + frame_cost > limit)) {
          all->calls.push_back({{}, row, row});
          unit_cost = 0;
        }
        all->calls.back().row1 = row + frame_rows;
        std::vector<FrameSlice>& sl = all->calls.back().slices;
        if (!sl.empty() && sl.back().item == it && sl.back().t1 == f) ++sl.back().t1;
        else sl.push_back({it, f, f + 1});
        unit_cost += frame_cost;
      }
    }
  } else {
    lazy = false;
    int64_t row = 0, call_cost = 0;
    for (const MediaPixels* it : items) {
      VLM_CHECK(t.cost(*it) <= t.reserved_cost(), "media item of {} encoder rows > the {} reserved", t.cost(*it),
                t.reserved_cost());
      if (all->calls.empty() || call_cost + t.cost(*it) > t.reserved_cost()) {
        all->calls.push_back({{}, row, row});
        call_cost = 0;
      }
      all->calls.back().slices.push_back({it, 0, item_frames(*it)});
      call_cost += t.cost(*it);
      row += t.out_rows(*it);
      all->calls.back().row1 = row;
    }
  }
  if (!lazy) all->ensure(0, all->rows);
  std::vector<std::shared_ptr<const DeviceEmbeddings>> out;
  for (size_t k = 0; k < dests.size(); ++k) {
    auto e = std::make_shared<DataParallelEmbeddings>();
    e->data = all->bufs[k].as<float>();
    e->rows = all->rows;
    e->all = all;
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace vlm

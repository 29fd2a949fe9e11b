#include "model/vision/cuda/cuda_vision_tower.h"

#include <fmt/format.h>

#include <vector>

#include "kernels/core/check.h"

namespace vlm {

void CudaVisionTower::encode_frames(std::span<const FrameSlice> slices, float* out, cudaStream_t s) {
  std::vector<const MediaPixels*> items;
  for (const FrameSlice& f : slices) {
    VLM_CHECK(f.t0 == 0 && f.t1 == item_frames(*f.item), "frames {}..{} of an item of {}: this tower takes whole items",
              f.t0, f.t1, item_frames(*f.item));
    items.push_back(f.item);
  }
  encode(items, out, s);
}

std::vector<std::vector<FrameSlice>> CudaVisionTower::frame_groups(std::span<const FrameSlice> slices) const {
  std::vector<std::vector<FrameSlice>> units;
  for (const FrameSlice& f : slices) units.push_back({f});
  return units;
}

void check_vision_fits(const CudaVisionTower& tower, const MediaPixels& item, int k) {
  // A tower that splits frames encodes an item in whole-frame groups: one frame must fit.
  const bool per_frame = tower.splits_frames() && item_frames(item) > 1;
  const int64_t cost = per_frame ? tower.cost(item) / item_frames(item) : tower.cost(item);
  const int64_t reserved = tower.reserved_cost();
  if (cost <= reserved) return;
  const double need = static_cast<double>(tower.workspace_bytes(cost)) / (1 << 30);
  const double have = static_cast<double>(tower.workspace_bytes(reserved)) / (1 << 30);
  throw RequestError(400, "invalid_request_error",
                     fmt::format("{} {} needs {} vision-encoder rows{} ({:.2f} GiB of GPU activations); the server "
                                 "reserves {} rows ({:.2f} GiB) for the encoder (--max-media-patches): send fewer "
                                 "frames or a smaller resolution",
                                 modality_name(item.modality), k, cost, per_frame ? " per frame" : "", need, reserved, have),
                     "messages");
}

}  // namespace vlm

// Weight uploads: host tensors (any stored dtype) converted to one device dtype and copied into
// one DeviceBuffer, parts concatenated in order (fused projections: [Wq; Wk; Wv], [Wgate; Wup]).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "kernels/core/tensor.h"
#include "kernels/cuda/core/device_buffer.h"

namespace vlm::cuda {

// Uploads the concatenation of `parts` as `dt` (synchronous copies); adds its bytes to *bytes_total.
DeviceBuffer upload_converted(std::span<const TensorView> parts, DType dt, int64_t* bytes_total);
inline DeviceBuffer upload_converted(std::initializer_list<TensorView> parts, DType dt, int64_t* bytes_total) {
  return upload_converted(std::span<const TensorView>(parts.begin(), parts.size()), dt, bytes_total);
}

// A TensorView of a host f32 vector (for upload_converted).
inline TensorView f32_view(const std::vector<float>& v) {
  return TensorView(const_cast<float*>(v.data()), DType::F32, {static_cast<int64_t>(v.size())});
}

}  // namespace vlm::cuda

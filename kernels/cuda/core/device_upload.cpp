#include "kernels/cuda/core/device_upload.h"

namespace vlm::cuda {

DeviceBuffer upload_converted(std::span<const TensorView> parts, DType dt, int64_t* bytes_total) {
  int64_t n = 0;
  for (const TensorView& p : parts) n += p.numel();
  const size_t esz = dtype_size(dt);
  DeviceBuffer buf(static_cast<size_t>(n) * esz);
  std::vector<char> staging;
  std::vector<float> f32;
  int64_t off = 0;
  for (const TensorView& p : parts) {
    const int64_t m = p.numel();
    const void* src = p.data;
    if (p.dtype != dt) {
      f32.resize(static_cast<size_t>(m));
      staging.resize(static_cast<size_t>(m) * esz);
      convert_to_f32(p.data, p.dtype, f32.data(), m);
      convert_from_f32(f32.data(), dt, staging.data(), m);
      src = staging.data();
    }
    VLM_CUDA_CHECK(cudaMemcpy(buf.as<char>() + off * esz, src, static_cast<size_t>(m) * esz, cudaMemcpyHostToDevice));
    off += m;
  }
  if (bytes_total) *bytes_total += n * static_cast<int64_t>(esz);
  return buf;
}

}  // namespace vlm::cuda

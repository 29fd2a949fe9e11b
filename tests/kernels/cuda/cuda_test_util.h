// Host <-> device helpers and error measures for the GPU kernel tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/core/dtype.h"
#include "kernels/cuda/core/device_buffer.h"

namespace vlm::testing {

template <typename T>
cuda::DeviceBuffer to_device(const std::vector<T>& v) {
  cuda::DeviceBuffer b(v.size() * sizeof(T));
  VLM_CUDA_CHECK(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}

template <typename T>
std::vector<T> to_host(const cuda::DeviceBuffer& b, size_t n) {
  VLM_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> v(n);
  VLM_CUDA_CHECK(cudaMemcpy(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

// Values of type dt (raw bytes) from floats, and back.
inline std::vector<uint8_t> encode(const std::vector<float>& x, DType dt) {
  std::vector<uint8_t> out(x.size() * dtype_size(dt));
  convert_from_f32(x.data(), dt, out.data(), static_cast<int64_t>(x.size()));
  return out;
}
inline std::vector<float> decode(const std::vector<uint8_t>& raw, DType dt) {
  std::vector<float> out(raw.size() / dtype_size(dt));
  convert_to_f32(raw.data(), dt, out.data(), static_cast<int64_t>(out.size()));
  return out;
}
// Rounds through dt (so CPU references see the GPU's inputs).
inline std::vector<float> round_to(const std::vector<float>& x, DType dt) { return decode(encode(x, dt), dt); }

inline std::vector<float> random_vector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// ||a - b|| / ||b|| over all elements; NaN anywhere gives +inf.
// Normalized error max|got - ref| / max|ref| (a non-finite got: +inf).
inline double normalized_error(const std::vector<float>& got, const std::vector<float>& ref) {
  double err = 0, mag = 1e-30;
  for (size_t i = 0; i < ref.size(); ++i) {
    err = std::max(err, std::isfinite(got[i]) ? std::abs(double(got[i]) - ref[i]) : INFINITY);
    mag = std::max(mag, std::abs(double(ref[i])));
  }
  return err / mag;
}

inline double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i])) return INFINITY;
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

}  // namespace vlm::testing

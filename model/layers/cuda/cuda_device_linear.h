// The weights of the GPU's linear layers and norms, shared by CudaLayers' decoder and vision
// layers: a norm before a layer (RMSNorm or LayerNorm, weights f32), a linear layer's parts
// concatenated on the device, and the product y = x W^T (+ bias) (+ y) as CudaDecoder and the
// vision towers chose it (the GEMV for few 16-bit rows when the step allows it, else cuBLASLt).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/core/device_buffer.h"
#include "model/layers/cuda/cuda_step.h"
#include "model/layers/layer_specs.h"

namespace vlm {

// A norm on the GPU: weight [K] f32, LayerNorm's bias [K] f32 (else empty).
struct CudaPreNorm {
  cuda::DeviceBuffer w, b;
  float eps = 0;
  bool rms = true;
  // h [M, K] of h_dt = norm(x [M, K] f32); h may be x when h_dt is F32.
  void apply(const float* x, int64_t M, int64_t K, void* h, DType h_dt, cudaStream_t s) const;
};

// Null for a null spec; adds the uploaded bytes to *bytes.
std::unique_ptr<CudaPreNorm> upload_pre_norm(const WeightSource& w, const NormSpec* spec, int64_t* bytes);

// A linear layer's weights on the GPU: the parts concatenated [N, K] (dt), their biases in dt and
// in f32 (the dtype of the output they are added to), or none. An FP8 layer
// (cuda_fp8_linear.h) holds w8 [N, K] E4M3 and w_scale [N] f32 instead of w (dt is then BF16).
struct DeviceLinear {
  cuda::DeviceBuffer w, bias_dt, bias_f32;
  cuda::DeviceBuffer w8, w_scale;
  int64_t N = 0, K = 0;
  bool fp8() const { return w8.get() != nullptr; }
  const void* bias(DType out) const {
    if (!bias_dt.get()) return nullptr;
    return out == DType::F32 ? bias_f32.get() : bias_dt.get();
  }
};

// weights false: the biases only (a layer over another layer's weight).
DeviceLinear upload_linear(const WeightSource& src, const std::vector<LinearPart>& parts, DType dt, bool weights,
                           int64_t* bytes);

// y [M, N] (out_dt) = x [M, K] (s.dt) W^T (+ bias) (+ y when accumulate): the GEMV for few 16-bit
// rows when s.gemv, else cuBLASLt.
void cuda_product(CudaStep& s, const void* x, const void* w, const void* bias, void* y, DType out_dt, bool accumulate,
                  int64_t M, int64_t N, int64_t K);

}  // namespace vlm

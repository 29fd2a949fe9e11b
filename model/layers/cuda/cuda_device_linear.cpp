#include "model/layers/cuda/cuda_device_linear.h"

#include "kernels/core/check.h"
#include "kernels/cuda/core/device_upload.h"
#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/ops/ops_cuda.h"
#include "kernels/cuda/ops/vision_ops_cuda.h"
#include "model/layers/linear_parts.h"

namespace vlm {

void CudaPreNorm::apply(const float* x, int64_t M, int64_t K, void* h, DType h_dt, cudaStream_t s) const {
  if (rms) cuda::rms_norm(const_cast<float*>(x), nullptr, w.as<float>(), eps, nullptr, M, K, h, h_dt, s);
  else cuda::layer_norm(x, w.as<float>(), b.as<float>(), eps, M, K, h, h_dt, s);
}

std::unique_ptr<CudaPreNorm> upload_pre_norm(const WeightSource& w, const NormSpec* spec, int64_t* bytes) {
  if (spec == nullptr) return nullptr;
  auto n = std::make_unique<CudaPreNorm>();
  n->w = cuda::upload_converted({w.get(spec->weight)}, DType::F32, bytes);
  n->eps = spec->eps;
  n->rms = spec->kind == NormKind::Rms;
  if (!n->rms) {
    VLM_CHECK(!spec->bias.empty(), "LayerNorm {}{} without a bias", w.prefix(), spec->weight.name);
    n->b = cuda::upload_converted({w.get(spec->bias, spec->weight.shape)}, DType::F32, bytes);
  }
  return n;
}

DeviceLinear upload_linear(const WeightSource& src, const std::vector<LinearPart>& parts, DType dt, bool weights,
                           int64_t* bytes) {
  const std::vector<HostLinearPart> host = load_linear_parts(src, parts);
  DeviceLinear d;
  std::vector<TensorView> ws, bs;
  for (const HostLinearPart& p : host) {
    ws.push_back(p.w);
    d.N += p.w.dim(0);
    if (p.bias.data()) bs.push_back(p.bias.view());
  }
  d.K = host.front().w.dim(1);
  VLM_CHECK(bs.empty() || bs.size() == host.size(), "{}{}: a bias on some parts only", src.prefix(),
            parts.front().weight.name);
  if (weights) d.w = cuda::upload_converted(std::span<const TensorView>(ws), dt, bytes);
  if (!bs.empty()) {
    d.bias_dt = cuda::upload_converted(std::span<const TensorView>(bs), dt, bytes);
    d.bias_f32 = cuda::upload_converted(std::span<const TensorView>(bs), DType::F32, bytes);
  }
  return d;
}

void cuda_product(CudaStep& s, const void* x, const void* w, const void* bias, void* y, DType out_dt, bool accumulate,
                  int64_t M, int64_t N, int64_t K) {
  if (s.gemv && cuda::gemv_supported(M, K, s.dt))
    cuda::gemv(x, w, s.dt, bias, y, out_dt, accumulate, M, N, K, s.stream);
  else
    s.gemm->linear(x, w, s.dt, bias, y, out_dt, accumulate ? 1.0f : 0.0f, M, N, K, s.stream);
}

}  // namespace vlm

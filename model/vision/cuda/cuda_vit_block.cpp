#include "model/vision/cuda/cuda_vit_block.h"

#include <cmath>

#include "kernels/cuda/attention/varlen_attention.h"
#include "kernels/cuda/core/device_upload.h"
#include "kernels/cuda/ops/ops_cuda.h"
#include "model/vision/cuda/cuda_vision_cudnn.h"

namespace vlm {

using cuda::upload_converted;

namespace {

// An optional tensor (empty view: an empty buffer).
cuda::DeviceBuffer upload_optional(const TensorView& t, DType dt, int64_t* bytes) {
  return t.empty() ? cuda::DeviceBuffer() : upload_converted({t}, dt, bytes);
}

}  // namespace

VitBlockWeights upload_vit_block(const VitBlockHost& h, DType dt, int64_t* bytes) {
  VitBlockWeights w;
  w.norm1_w = upload_converted({h.norm1_w}, DType::F32, bytes);
  w.norm2_w = upload_converted({h.norm2_w}, DType::F32, bytes);
  w.norm1_b = upload_optional(h.norm1_b, DType::F32, bytes);
  w.norm2_b = upload_optional(h.norm2_b, DType::F32, bytes);
  w.qkv = upload_converted(h.qkv, dt, bytes);
  w.qkv_b = upload_converted(h.qkv_b, dt, bytes);
  w.proj = upload_converted({h.proj}, dt, bytes);
  w.proj_b = upload_converted({h.proj_b}, DType::F32, bytes);
  w.mlp_in = upload_converted(h.mlp_in, dt, bytes);
  w.mlp_in_b = upload_converted(h.mlp_in_b, dt, bytes);
  w.mlp_out = upload_converted({h.mlp_out}, dt, bytes);
  w.mlp_out_b = upload_converted({h.mlp_out_b}, DType::F32, bytes);
  return w;
}

void vit_norm(const VitBlockShape& sh, const cuda::DeviceBuffer& w, const cuda::DeviceBuffer& b, DType dt, int64_t T,
              const float* x, void* h, cudaStream_t s) {
  if (sh.rms) cuda::rms_norm(const_cast<float*>(x), nullptr, w.as<float>(), sh.eps, nullptr, T, sh.C, h, dt, s);
  else cuda::layer_norm(x, w.as<float>(), b.as<float>(), sh.eps, T, sh.C, h, dt, s);
}

void vit_block_forward(cuda::CublasLtGemm& gemm, const VitBlockWeights& B, const VitBlockShape& sh, DType dt,
                       int64_t T, const VitBlockBuffers& buf, const VitSegments& seg, const float* rope,
                       cudaStream_t s) {
  const int64_t C = sh.C, I = sh.I;
  const size_t e = dtype_size(dt);
  vit_norm(sh, B.norm1_w, B.norm1_b, dt, T, buf.x, buf.h, s);
  gemm.linear(buf.h, B.qkv.get(), dt, B.qkv_b.get(), buf.qkv, dt, 0.0f, T, 3 * C, C, s);
  if (rope) cuda::vision_rope_qk(buf.qkv, dt, T, sh.H, sh.D, rope, s);
  const char* qkv = static_cast<const char*>(buf.qkv);
  const float scale = 1.0f / std::sqrt(static_cast<float>(sh.D));
  if (seg.cudnn == nullptr || seg.equal_len <= 0 ||
      !seg.cudnn->attention(qkv, qkv + C * e, qkv + 2 * C * e, 3 * C, dt, sh.H, sh.D, seg.segments, seg.equal_len,
                            scale, buf.attn, s))
    cuda::varlen_attention(qkv, qkv + C * e, qkv + 2 * C * e, 3 * C, dt, sh.H, sh.D, seg.cu, seg.segments,
                           seg.max_len, scale, buf.attn, s);
  gemm.linear(buf.attn, B.proj.get(), dt, B.proj_b.get(), buf.x, DType::F32, 1.0f, T, C, C, s);
  vit_norm(sh, B.norm2_w, B.norm2_b, dt, T, buf.x, buf.h, s);
  if (sh.gated) {
    gemm.linear(buf.h, B.mlp_in.get(), dt, B.mlp_in_b.get(), buf.f, dt, 0.0f, T, 2 * I, C, s);
    cuda::silu_mul(buf.f, T, I, buf.act, dt, s);
    gemm.linear(buf.act, B.mlp_out.get(), dt, B.mlp_out_b.get(), buf.x, DType::F32, 1.0f, T, C, I, s);
  } else {
    gemm.linear(buf.h, B.mlp_in.get(), dt, B.mlp_in_b.get(), buf.f, dt, 0.0f, T, I, C, s);
    cuda::activation(buf.f, dt, T * I, sh.act, s);
    gemm.linear(buf.f, B.mlp_out.get(), dt, B.mlp_out_b.get(), buf.x, DType::F32, 1.0f, T, C, I, s);
  }
}

}  // namespace vlm

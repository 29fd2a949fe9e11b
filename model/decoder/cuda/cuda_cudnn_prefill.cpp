// CudaDecoder's prefill attention through cuDNN (contract in cuda_cudnn_prefill.h).
#include "model/decoder/cuda/cuda_cudnn_prefill.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include "kernels/core/log.h"
#include "kernels/cuda/core/cuda_check.h"

namespace vlm {
namespace {

bool env_enabled() {
  const char* e = std::getenv("VLM_CUDA_PREFILL_CUDNN");
  if (e == nullptr) return true;
  const std::string v(e);
  return !(v == "0" || v == "off" || v == "false" || v == "OFF" || v == "FALSE");
}

}  // namespace

CudaCudnnPrefill::CudaCudnnPrefill(int mode, int min_tokens, int bucket)
    : enabled_(mode < 0 ? env_enabled() : mode != 0), min_tokens_(std::max(min_tokens, 2)), bucket_(std::max(bucket, 64)) {}

CudaCudnnPrefill::~CudaCudnnPrefill() = default;

bool CudaCudnnPrefill::covers(const ForwardBatch& b, const ModelConfig& c, DType dt) {
  if (!enabled_ || (dt != DType::BF16 && dt != DType::F16) || c.head_dim % 8 != 0 || c.head_dim > 128 ||
      c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0 || b.context_lens.empty())
    return false;
  for (size_t s = 0; s < b.context_lens.size(); ++s) {
    const int q_len = b.cu_seqlens_q[s + 1] - b.cu_seqlens_q[s];
    if (q_len != b.context_lens[s] || q_len < min_tokens_ || failed_.count(padded(q_len))) return false;
  }
  if (att_ == nullptr) {
    att_ = std::make_unique<cuda::CudnnAttention>();
    std::string why;
    if (!att_->available(&why)) {
      VLM_LOG_WARN("cuDNN prefill attention unavailable ({}); prefill uses the built-in kernel", why);
      enabled_ = false;
      return false;
    }
    VLM_LOG_INFO("prefill attention of first chunks >= {} tokens through cuDNN {} ({})", min_tokens_, att_->version(),
                 att_->library_path());
  }
  return true;
}

bool CudaCudnnPrefill::attention(const ForwardBatch& b, const void* q, void* k, void* v, void* out, int64_t T, int H,
                                 int Hkv, int D, DType dt, float scale, cudaStream_t stream) {
  const size_t row_kv = size_t(Hkv) * D * dtype_size(dt), row_q = size_t(H) * D * dtype_size(dt);
  VLM_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(k) + T * row_kv, 0, size_t(bucket_) * row_kv, stream));
  VLM_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(v) + T * row_kv, 0, size_t(bucket_) * row_kv, stream));
  for (size_t s = 0; s + 1 < b.cu_seqlens_q.size(); ++s) {
    const int64_t row = b.cu_seqlens_q[s];
    const int len = b.cu_seqlens_q[s + 1] - b.cu_seqlens_q[s];
    if (failed_.count(padded(len))) return false;  // warned when it failed
    cuda::CudnnAttentionShape shape;
    shape.seq_q = shape.seq_kv = padded(len);
    shape.heads = H;
    shape.kv_heads = Hkv;
    shape.head_dim = D;
    shape.causal = true;
    shape.dtype = dt;
    std::string why;
    if (att_->num_candidates(shape) == 0) {  // first use of this bucket: build its plan
      const auto t0 = std::chrono::steady_clock::now();
      if (!att_->prepare(shape, &why)) {
        VLM_LOG_WARN("cuDNN prefill plan for {} tokens did not build; the built-in kernel runs them: {}", shape.seq_q,
                     why);
        failed_.insert(shape.seq_q);
        return false;
      }
      VLM_LOG_INFO("cuDNN prefill plan for {} tokens built in {:.0f} ms", shape.seq_q,
                   std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    if (!att_->run(shape, static_cast<const char*>(q) + row * row_q, static_cast<const char*>(k) + row * row_kv,
                   static_cast<const char*>(v) + row * row_kv, static_cast<char*>(out) + row * row_q, scale, stream,
                   &why)) {
      VLM_LOG_WARN("cuDNN prefill attention failed ({} tokens); the built-in kernel runs them: {}", shape.seq_q, why);
      failed_.insert(shape.seq_q);
      return false;
    }
  }
  ++calls_;
  return true;
}

}  // namespace vlm

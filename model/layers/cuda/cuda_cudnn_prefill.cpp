// CudaDecoder's prefill attention through cuDNN (contract in cuda_cudnn_prefill.h).
#include "model/layers/cuda/cuda_cudnn_prefill.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include "kernels/core/env_switch.h"
#include "kernels/core/log.h"
#include "kernels/cuda/attention/cudnn_library.h"
#include "kernels/cuda/attention/paged_kv_gather.h"
#include "kernels/cuda/core/cuda_check.h"

namespace vlm {
namespace {

bool env_enabled() { return env_switch("VLM_CUDA_PREFILL_CUDNN", true); }

bool model_ok(const ModelConfig& c, DType dt) {
  return (dt == DType::BF16 || dt == DType::F16) && c.head_dim % 8 == 0 && c.head_dim <= 128 && c.num_kv_heads > 0 &&
         c.num_heads % c.num_kv_heads == 0;
}

}  // namespace

bool cudnn_paged_prefill_enabled() { return env_switch("VLM_CUDA_PREFILL_CUDNN_CHUNKS", true); }

CudaCudnnPrefill::CudaCudnnPrefill(int mode, int min_tokens, int bucket)
    : enabled_(mode < 0 ? env_enabled() : mode != 0), min_tokens_(std::max(min_tokens, 2)), bucket_(std::max(bucket, 64)) {
  if (const char* e = std::getenv("VLM_CUDA_PREFILL_CUDNN_KV_BUCKETS"); e != nullptr && *e != '\0')
    kv_buckets_ = std::max(0, std::atoi(e));
}

CudaCudnnPrefill::~CudaCudnnPrefill() {
  if (scratch_ != nullptr) cudaFree(scratch_);
}

int CudaCudnnPrefill::padded_kv(int64_t len) const {
  if (kv_buckets_ == 0 && scratch_rows_ > 0) return static_cast<int>(scratch_rows_);  // one plan for every context
  int64_t step = bucket_;
  while (step * 2 * std::max(kv_buckets_, 1) <= len) step *= 2;  // <= kv_buckets_ buckets per octave
  return static_cast<int>((len + step - 1) / step * step);
}

int64_t CudaCudnnPrefill::reserve(const ModelConfig& c, int64_t max_model_len, DType dt) {
  const int64_t max_len = max_model_len > 0 ? max_model_len : c.max_position_embeddings;
  if (!enabled_ || scratch_ != nullptr || max_len <= 0 || !model_ok(c, dt)) return slack_rows();
  if (!cudnn_paged_prefill_enabled()) return slack_rows();  // kPaged off: no scratch, covered() false
  if (!ensure_loaded()) return slack_rows();  // no cuDNN: no scratch (and no slack rows)
  const int64_t Hkv = c.num_kv_heads, D = c.head_dim;
  const int64_t rows = kv_buckets_ == 0 ? (max_len + bucket_ - 1) / bucket_ * bucket_ : padded_kv(max_len);
  const int64_t bytes = 2 * rows * Hkv * D * static_cast<int64_t>(dtype_size(dt));
  if (cudaMalloc(&scratch_, static_cast<size_t>(bytes)) != cudaSuccess) {
    cudaGetLastError();  // clear the (not sticky) allocation error
    scratch_ = nullptr;
    VLM_LOG_WARN("cuDNN chunked prefill off: {:.0f} MiB for its {}-token K/V scratch not available",
                 static_cast<double>(bytes) / (1 << 20), rows);
    return slack_rows();
  }
  VLM_CUDA_CHECK(cudaMemset(scratch_, 0, static_cast<size_t>(bytes)));  // padded keys must be finite
  scratch_rows_ = rows;
  scratch_bytes_ = bytes;
  VLM_LOG_INFO("cuDNN chunked prefill: K/V scratch of {} tokens ({:.0f} MiB)", rows,
               static_cast<double>(bytes) / (1 << 20));
  return slack_rows();
}

bool CudaCudnnPrefill::ensure_loaded() {
  if (att_ != nullptr) return enabled_;
  att_ = std::make_unique<cuda::CudnnAttention>();
  std::string why;
  if (!att_->available(&why)) {
    VLM_LOG_WARN("cuDNN prefill attention unavailable ({}); prefill uses the built-in kernel", why);
    enabled_ = false;
    return false;
  }
  std::string found;
  cuda::cudnn_api(&found);
  VLM_LOG_INFO("prefill attention of chunks >= {} tokens through cuDNN {} ({}; {})", min_tokens_, att_->version(),
               att_->library_path(), found);
  return true;
}

bool CudaCudnnPrefill::covered(int q_len, int ctx) const {
  return q_len >= min_tokens_ && ctx >= q_len && padded_kv(ctx) <= scratch_rows_ &&
         failed_.count({padded(q_len), padded_kv(ctx), true}) == 0;
}

CudaCudnnPrefill::Mode CudaCudnnPrefill::plan_step(const ForwardBatch& b, const ModelConfig& c, DType dt) {
  if (!enabled_ || !model_ok(c, dt) || b.context_lens.empty()) return kNone;
  bool first = true, any = false;
  for (size_t s = 0; s < b.context_lens.size(); ++s) {
    const int q_len = b.cu_seqlens_q[s + 1] - b.cu_seqlens_q[s];
    if (q_len != b.context_lens[s] || q_len < min_tokens_ || failed_.count({padded(q_len), padded(q_len), false}))
      first = false;
    any = any || covered(q_len, b.context_lens[s]);
  }
  if (!first && !any) return kNone;
  if (!ensure_loaded()) return kNone;
  return first ? kFirstChunks : kPaged;
}

bool CudaCudnnPrefill::ready(const cuda::CudnnAttentionShape& shape) {
  if (failed_.count({shape.seq_q, shape.seq_kv, shape.bottom_right})) return false;  // warned when it failed
  if (att_->num_candidates(shape) > 0) return true;
  const auto t0 = std::chrono::steady_clock::now();
  std::string why;
  if (!att_->prepare(shape, &why)) {
    VLM_LOG_WARN("cuDNN prefill plan for {} queries over {} keys did not build; the built-in kernel runs them: {}",
                 shape.seq_q, shape.seq_kv, why);
    failed_.insert({shape.seq_q, shape.seq_kv, shape.bottom_right});
    return false;
  }
  VLM_LOG_INFO("cuDNN prefill plan for {} queries over {} keys built in {:.0f} ms", shape.seq_q, shape.seq_kv,
               std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return true;
}

bool CudaCudnnPrefill::attention(Mode m, const ForwardBatch& b, const cuda::CudaAttentionBatch& meta,
                                 const PagedKVLayer& kv, const void* q, void* k, void* v, void* out, int64_t T, int H,
                                 DType dt, float scale, cudaStream_t stream, const Builtin& builtin) {
  const int D = kv.head_dim;
  const bool ok = m == kFirstChunks ? first_chunks(b, meta, q, k, v, out, T, H, kv.num_kv_heads, D, dt, scale, stream)
                  : m == kPaged     ? paged(b, meta, kv, q, out, H, D, dt, scale, stream, builtin)
                                    : false;
  if (ok) ++calls_;
  if (ok && m == kPaged) ++paged_calls_;
  return ok;
}

bool CudaCudnnPrefill::first_chunks(const ForwardBatch& b, const cuda::CudaAttentionBatch&, const void* q, void* k,
                                    void* v, void* out, int64_t T, int H, int Hkv, int D, DType dt, float scale,
                                    cudaStream_t stream) {
  const size_t row_kv = size_t(Hkv) * D * dtype_size(dt), row_q = size_t(H) * D * dtype_size(dt);
  VLM_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(k) + T * row_kv, 0, size_t(bucket_) * row_kv, stream));
  VLM_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(v) + T * row_kv, 0, size_t(bucket_) * row_kv, stream));
  for (size_t s = 0; s + 1 < b.cu_seqlens_q.size(); ++s) {
    const int64_t row = b.cu_seqlens_q[s];
    const int len = b.cu_seqlens_q[s + 1] - b.cu_seqlens_q[s];
    cuda::CudnnAttentionShape shape;
    shape.seq_q = shape.seq_kv = padded(len);
    shape.heads = H;
    shape.kv_heads = Hkv;
    shape.head_dim = D;
    shape.causal = true;
    shape.dtype = dt;
    if (!ready(shape)) return false;
    std::string why;
    if (!att_->run(shape, static_cast<const char*>(q) + row * row_q, static_cast<const char*>(k) + row * row_kv,
                   static_cast<const char*>(v) + row * row_kv, static_cast<char*>(out) + row * row_q, scale, stream,
                   &why)) {
      VLM_LOG_WARN("cuDNN prefill attention failed ({} tokens); the built-in kernel runs them: {}", shape.seq_q, why);
      failed_.insert({shape.seq_q, shape.seq_kv, shape.bottom_right});
      return false;
    }
  }
  return true;
}

bool CudaCudnnPrefill::paged(const ForwardBatch& b, const cuda::CudaAttentionBatch& meta, const PagedKVLayer& kv,
                             const void* q, void* out, int H, int D, DType dt, float scale, cudaStream_t stream,
                             const Builtin& builtin) {
  if (kv.dtype != dt || !cuda::paged_kv_gather_supported(kv) || scratch_ == nullptr) return false;
  const int Hkv = kv.num_kv_heads;
  const size_t row_q = size_t(H) * D * dtype_size(dt);
  char* k_scratch = static_cast<char*>(scratch_);
  char* v_scratch = k_scratch + scratch_bytes_ / 2;
  const int S = static_cast<int>(b.context_lens.size());
  for (int s = 0; s < S; ++s) {  // the covered sequences, in order (later calls overwrite earlier padding)
    const int q_len = b.cu_seqlens_q[s + 1] - b.cu_seqlens_q[s], ctx = b.context_lens[s];
    if (!covered(q_len, ctx)) continue;
    cuda::CudnnAttentionShape shape;
    shape.seq_q = padded(q_len);
    shape.seq_kv = padded_kv(ctx);
    shape.heads = H;
    shape.kv_heads = Hkv;
    shape.head_dim = D;
    shape.causal = true;
    shape.bottom_right = true;
    shape.dtype = dt;
    if (!ready(shape)) return false;
    cuda::paged_kv_gather(kv, meta.block_tables + int64_t(s) * meta.max_blocks_per_seq, ctx, k_scratch, v_scratch,
                          stream);
    const int64_t row = b.cu_seqlens_q[s];
    std::string why;
    if (!att_->run_padded(shape, q_len, ctx, static_cast<const char*>(q) + row * row_q, k_scratch, v_scratch,
                          static_cast<char*>(out) + row * row_q, scale, stream, &why)) {
      VLM_LOG_WARN("cuDNN prefill attention failed ({} queries over {} keys); the built-in kernel runs them: {}",
                   q_len, ctx, why);
      failed_.insert({shape.seq_q, shape.seq_kv, shape.bottom_right});
      return false;
    }
  }
  for (int s = 0; s < S;) {  // the rest, per contiguous range of sequences, through the caller's kernel
    if (covered(b.cu_seqlens_q[s + 1] - b.cu_seqlens_q[s], b.context_lens[s])) {
      ++s;
      continue;
    }
    int e = s;
    cuda::CudaAttentionBatch r = meta;
    r.max_q_len = r.max_context_len = 0;
    for (; e < S && !covered(b.cu_seqlens_q[e + 1] - b.cu_seqlens_q[e], b.context_lens[e]); ++e) {
      r.max_q_len = std::max(r.max_q_len, b.cu_seqlens_q[e + 1] - b.cu_seqlens_q[e]);
      r.max_context_len = std::max(r.max_context_len, b.context_lens[e]);
    }
    r.num_seqs = e - s;
    r.cu_seqlens_q = meta.cu_seqlens_q + s;
    r.context_lens = meta.context_lens + s;
    r.block_tables = meta.block_tables + int64_t(s) * meta.max_blocks_per_seq;
    builtin(r);
    s = e;
  }
  return true;
}

}  // namespace vlm

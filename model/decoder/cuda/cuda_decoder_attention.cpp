// CudaDecoder's attention per layer (the contract is in cuda_decoder.h): RoPE and the K/V write,
// then attention over the paged cache with the step's methods.
#include <cmath>

#include "kernels/core/check.h"
#include "kernels/cuda/attention/decode_short.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/ops/ops_cuda.h"
#include "model/decoder/cuda/cuda_decoder.h"

namespace vlm {

namespace {
// Steps of how many sequences take the fused short decode (the kernel takes up to
// cuda::kDecodeShortMaxSeqs). One: measured in session 20 call M (H200), at 1 sequence the fused
// launch wins (Qwen3-8B step 4.495-4.525 vs 4.631-4.638 ms; attention bench 9.95 vs 12.86 us a layer
// at 1K, 15.11 vs 18.36 at 4K, 22.94 vs 23.44 at 8K), at 4 it loses (step 6.296 vs 5.975 ms; 25.74 vs
// 18.32 us a layer).
constexpr int kShortDecodeSeqs = 1;
}  // namespace

Act CudaDecoder::attend(int l, Act qkv, const RopeRows& rope, const cuda::HeadNorm& norm) {
  const ModelConfig& c = config();
  if (!attend_short(l, qkv.rows, qkv.data, rope, norm)) {
    rope_kv_write(l, qkv.rows, qkv.data, rope, norm);
    attention(l, qkv.rows, *meta_);
  }
  return Act{attn_.get(), qkv.rows, c.num_heads * c.head_dim, opt_.dtype};
}

bool CudaDecoder::attend_short(int l, int64_t T, void* qkv, const RopeRows& rope, const cuda::HeadNorm& norm) {
  // Only plain decode steps: the methods (SinkRouter routes, LOOK-M reads q after attention), the
  // probe (reads q before attention), sparse and cuDNN attention keep the two-kernel path.
  if (!decode_short_ || !decode_kernel() || methods_ || look_m_on_ || probe_ || sparse_ ||
      cudnn_mode_ != CudaCudnnPrefill::kNone || meta_ == nullptr || T != meta_->num_seqs ||
      meta_->num_seqs > kShortDecodeSeqs)
    return false;
  const ModelConfig& c = config();
  const PagedKVLayer& kv = kv_layers_[static_cast<size_t>(l)];
  const int H = static_cast<int>(c.num_heads);
  if ((norm.q_w != nullptr && norm.k_w == nullptr) ||
      !cuda::decode_short_supported(kv, opt_.dtype, H, rope.cols, norm.q_w != nullptr, meta_->num_seqs,
                                    meta_->max_context_len))
    return false;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  cuda::rope_kv_decode_attention(qkv, H, static_cast<const float*>(rope.table), rope.cols, q_.get(), kv, d_slots_,
                                 *meta_, scale, attn_.get(), opt_.dtype, stream_, norm);
  prof_.mark(stream_, "rope_kv_attention");
  ++decode_short_layers_;
  return true;
}

void CudaDecoder::attention(int l, int64_t T, const cuda::CudaAttentionBatch& meta) {
  const ModelConfig& c = config();
  const PagedKVLayer& kv = kv_layers_[static_cast<size_t>(l)];
  const int H = static_cast<int>(c.num_heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (probe_) probe_(l, q_.get(), H, kv, meta, scale, stream_);
  auto builtin = [&](cuda::CudaAttentionBatch m) {  // our kernels (all rows, or cuDNN's leftover ranges)
    if (decode_kernel() && methods_) sink_.route_layer(l, q_.get(), opt_.dtype, H, kv, m, stream_);  // group skips
    if (decode_kernel())
      cuda::paged_decode_attention(q_.get(), opt_.dtype, H, kv, m, scale, attn_.get(), decode_ws_.get(), stream_,
                                   fused_reduce_ ? decode_counters_.as<int32_t>() : nullptr);
    else if (fast_attention())
      cuda::paged_prefill_attention(q_.get(), opt_.dtype, H, kv, m, scale, attn_.get(), stream_);
    else
      cuda::paged_attention_naive(q_.get(), opt_.dtype, H, kv, m, scale, attn_.get(), stream_);
  };
  if (sparse_) {
    VLM_CHECK(fast_attention() && kv.dtype != DType::F32, "sparse prefill on the GPU needs D 64/128 and a bf16/f16 cache");
    sparse_prefill_.attention(l, *batch_, q_.get(), opt_.dtype, H, kv, meta, scale, attn_.get(), stream_, &prof_);
  } else if (!cudnn_.attention(cudnn_mode_, *batch_, meta, kv, q_.get(), k_.get(), v_.get(), attn_.get(), T, H,
                                opt_.dtype, scale, stream_, builtin)) {  // kNone: false
    builtin(meta);
  }
  if (look_m_on_)
    look_m_.layer(l, q_.get(), opt_.dtype, H, kv, *batch_, d_tables_, scale, stream_, opt_.tp.rank, opt_.tp.size);
  prof_.mark(stream_, "attention");
}

void CudaDecoder::rope_kv_write(int l, int64_t T, void* qkv, const RopeRows& rope, const cuda::HeadNorm& norm) {
  const ModelConfig& c = config();
  const PagedKVLayer& kv = kv_layers_[static_cast<size_t>(l)];
  const int64_t R = rope.cols;
  const auto* table = static_cast<const float*>(rope.table);
  const bool fuse_norm = norm.q_w == nullptr || cuda::rope_kv_write_norm_supported(c.head_dim);
  if (!CudaCudnnPrefill::uses_kv_rows(cudnn_mode_) && cuda::rope_kv_write_supported(kv, opt_.dtype, R) &&
      fuse_norm) {  // one pass
    cuda::rope_split_q_kv_write(qkv, T, c.num_heads, table, R, q_.get(), kv, d_slots_, opt_.dtype, stream_, norm);
    prof_.mark(stream_, "rope_kv_write");
    return;
  }
  if (norm.q_w) {
    cuda::head_rms_norm(qkv, T, c.num_heads, c.num_kv_heads, c.head_dim, norm.q_w, norm.k_w, norm.eps, opt_.dtype,
                        stream_);
    prof_.mark(stream_, "qk_norm");
  }
  cuda::rope_split_qkv(qkv, T, c.num_heads, c.num_kv_heads, c.head_dim, table, R, q_.get(), k_.get(), v_.get(),
                       opt_.dtype, stream_);
  prof_.mark(stream_, "rope");
  cuda::paged_kv_write(kv, k_.get(), v_.get(), opt_.dtype, d_slots_, T, stream_);
  prof_.mark(stream_, "kv_write");
}

}  // namespace vlm

#include "engine/backends/cuda_model_support.h"

#include <fmt/format.h>

#include "kernels/cuda/attention/varlen_attention.h"
#include "kernels/cuda/moe/moe_limits.h"

namespace vlm {

namespace {

constexpr int64_t kMaxHeadDim = 256;         // CudaDecoder, LOOK-M's kernels
constexpr int64_t kNaiveMaxContext = 12000;  // kernels/cuda/attention/attention_naive.cu (a row's scores in 48 KB)
constexpr int64_t kXAttnMaxHeads = 128;      // kernels/cuda/sparse_estimate/xattention_estimate.cuh
constexpr int64_t kSinkRouteSmem = 48 * 1024;  // kernels/cuda/sink_router/cuda_sink_router.cu's launch_route
constexpr int64_t kSinkRouteMaxHeads = 1024;

bool power_of_two(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

}  // namespace

std::vector<std::string> cuda_model_support(const ModelConfig& m, const EngineConfig& c, DType dtype,
                                            int64_t max_model_len, int64_t vision_head_dim) {
  std::vector<std::string> p;
  const int64_t H = m.num_heads, Hkv = m.num_kv_heads, D = m.head_dim;
  if (H <= 0 || Hkv <= 0 || H % Hkv != 0) {
    p.push_back(fmt::format("{} query heads over {} KV heads: the GPU's attention needs a whole number of query heads "
                            "per KV head",
                            H, Hkv));
    return p;  // the group size G below means nothing
  }
  const int64_t G = H / Hkv;
  if (m.moe.enabled() && (m.moe.num_experts > cuda::kMoeMaxExperts || m.moe.top_k > cuda::kMoeMaxTopK))
    p.push_back(fmt::format("{}'s mixture-of-experts layers ({} experts, top {}): the GPU routes at most {} experts, "
                            "top {}",
                            m.architecture.empty() ? std::string("this model") : m.architecture, m.moe.num_experts,
                            m.moe.top_k, cuda::kMoeMaxExperts, cuda::kMoeMaxTopK));
  if (D <= 0 || D % 8 != 0)
    p.push_back(fmt::format("head size {}: the GPU's KV cache write needs a multiple of 8", D));
  if (D > kMaxHeadDim) p.push_back(fmt::format("head size {}: the GPU's kernels take at most {}", D, kMaxHeadDim));
  if (!power_of_two(c.block_size))
    p.push_back(fmt::format("--block-size {}: the GPU's attention kernels need a power of two", c.block_size));
  const bool fast = cuda_fast_head_dim(D);
  if (!fast && max_model_len > kNaiveMaxContext)
    p.push_back(fmt::format("head size {} runs on the GPU's reference attention kernel (the tensor-core kernels take "
                            "64 or 128), which holds at most {} tokens of context, and max_model_len is {}: pass "
                            "--max-model-len {} (or less)",
                            D, kNaiveMaxContext, max_model_len, kNaiveMaxContext));
  if (c.sparse_prefill.enabled()) {
    const char* name = sparse_prefill_method_name(c.sparse_prefill.method);
    if (!plannable_without_host_data(c.sparse_prefill) || c.sparse_prefill.block != 64)
      p.push_back(fmt::format("--sparse-prefill {}: the GPU plans a_shape, tri_shape, grid, vertical_slash, "
                              "xattention (strides dividing 64) and mminference over 64-token blocks; use --device cpu "
                              "for this configuration",
                              name));
    if (dtype == DType::F32)
      p.push_back(fmt::format("--sparse-prefill {}: the GPU's block-sparse kernel needs a bf16/f16 cache, not --dtype "
                              "float32",
                              name));
    if (!fast)
      p.push_back(fmt::format("--sparse-prefill {}: the GPU's block-sparse kernel takes head size 64 or 128, not {}",
                              name, D));
    if (c.sparse_prefill.method == SparsePrefillMethod::XAttention && H > kXAttnMaxHeads)
      p.push_back(fmt::format("--sparse-prefill xattention: the GPU estimates at most {} query heads, not {}",
                              kXAttnMaxHeads, H));
  }
  if (c.sink_router) {
    if (!fast || G > kCudaDecodeMaxGroup)
      p.push_back(fmt::format("--sink-router on: the GPU routes on its decode kernel (head size 64 or 128, at most {} "
                              "query heads per KV head), not head size {} with {} per KV head; every decode would run "
                              "exact",
                              kCudaDecodeMaxGroup, D, G));
    const int64_t smem = (H + (Hkv + H) * (D + 1)) * 4;
    if (H > kSinkRouteMaxHeads || smem > kSinkRouteSmem)
      p.push_back(fmt::format("--sink-router on: the GPU's routing kernel holds {} query heads of size {} in {} bytes "
                              "of shared memory, above its {} (or more than {} heads)",
                              H, D, smem, kSinkRouteSmem, kSinkRouteMaxHeads));
  }
  if (c.look_m.enabled && (G > kCudaDecodeMaxGroup || D > kMaxHeadDim))
    p.push_back(fmt::format("--look-m: the GPU's LOOK-M scores take at most {} query heads per KV head and head size "
                            "{}, not {} and {}",
                            kCudaDecodeMaxGroup, kMaxHeadDim, G, D));
  if (c.kv_dtype == DType::F8_E4M3) {  // the FP8 cache's readers: the mma.sync prefill, split-K decode, naive kernels
    if (dtype == DType::F32)
      p.push_back("--kv-cache-dtype fp8 with --dtype float32: the exact path keeps an f32 cache; use --dtype "
                  "bfloat16 or float16");
    // The block-sparse kernel, the grid / vertical-slash / boundary estimates and LOOK-M read FP8;
    // the XAttention estimate (an mma.sync GEMM over 16-bit cache tiles) does not yet.
    if (c.sparse_prefill.enabled() && uses_xattention_heads(c.sparse_prefill))
      p.push_back(fmt::format("--sparse-prefill {} with --kv-cache-dtype fp8: the GPU's XAttention estimate does not "
                              "read an FP8 cache yet (its heads' scores run on 16-bit cache tiles); use a bf16 cache "
                              "or another method",
                              sparse_prefill_method_name(c.sparse_prefill.method)));
  }
  if (vision_head_dim > 0) {
    const bool tensor_cores = dtype != DType::F32 && vision_head_dim % 8 == 0 && vision_head_dim <= 128;
    if (!tensor_cores && c.max_media_patches > cuda::kMaxNaiveLen)
      p.push_back(fmt::format("the vision tower's attention (head size {}, {}) runs on the GPU's reference kernel, "
                              "which holds at most {} patches of one image or frame, and --max-media-patches is {}: "
                              "pass --max-media-patches {} (or less)",
                              vision_head_dim, dtype_name(dtype), cuda::kMaxNaiveLen, c.max_media_patches,
                              cuda::kMaxNaiveLen));
  }
  return p;
}

std::string cuda_support_message(const std::vector<std::string>& problems) {
  std::string s = "--device cuda cannot run this model as configured: ";
  for (size_t i = 0; i < problems.size(); ++i) s += (i ? "; " : "") + problems[i];
  return s + " (--device cpu runs it)";
}

}  // namespace vlm

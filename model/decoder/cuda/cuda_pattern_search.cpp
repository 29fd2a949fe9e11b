#include "model/decoder/cuda/cuda_pattern_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/sparse_prefill/cuda_block_sparse.h"
#include "kernels/cuda/sparse_prefill/head_error.h"
#include "kernels/sparse_prefill/sparse_prefill_planner.h"
#include "model/decoder/cuda/cuda_decoder.h"

namespace vlm {
namespace {

SparsePrefillConfig candidate_config(const HeadPattern& pattern, int block) {
  SparsePrefillConfig sc;
  sc.method = SparsePrefillMethod::MMInference;
  sc.block = block;
  sc.default_head = pattern;
  return sc;
}

// One layer's measurements on the last chunk (the probe).
class LayerProbe {
 public:
  LayerProbe(const PatternSearchPrompt& prompt, const std::vector<PatternCandidate>& cands, int block, int q_len,
             PatternSearchTable& table)
      : prompt_(prompt), cands_(cands), block_(block), q_len_(q_len), table_(table) {
    const int N = static_cast<int>(prompt.ids.size());
    batch_.cu_seqlens_q = {0, q_len};
    batch_.context_lens = {N};
    batch_.prompt_lens = {N};
    batch_.prompt_modalities = {std::span<const ModalityTag>(prompt.tags)};
    causal_ = causal_key_blocks(q_len, N, block);
  }

  void operator()(int layer, const void* q, DType act, int H, const PagedKVLayer& kv,
                  const cuda::CudaAttentionBatch& meta, float scale, cudaStream_t stream) {
    const auto t0 = std::chrono::steady_clock::now();
    const int C = static_cast<int>(cands_.size()), D = kv.head_dim;
    const size_t rows_bytes = static_cast<size_t>(q_len_) * H * D * dtype_size(act);
    dense_.reserve(rows_bytes);
    out_.reserve(rows_bytes);
    sums_.reserve(sizeof(double) * C * H * 3);
    double* sums = sums_.as<double>();                   // [C, H, 2]
    double* counts = sums + static_cast<int64_t>(C) * H * 2;  // [C, H]
    VLM_CUDA_CHECK(cudaMemsetAsync(sums, 0, sizeof(double) * C * H * 3, stream));
    cuda::paged_prefill_attention(q, act, H, kv, meta, scale, dense_.get(), stream);
    host_ready_ = false;
    for (int ci = 0; ci < C; ++ci) {
      const cuda::SparsePlanView view = run(ci, layer, q, act, H, kv, meta, scale, stream);
      cuda::head_error_sums(out_.get(), dense_.get(), act, q_len_, H, D, sums + static_cast<int64_t>(ci) * H * 2,
                            stream);
      cuda::plan_head_blocks(view, 0, H, counts + static_cast<int64_t>(ci) * H, stream);
    }
    std::vector<double> host(static_cast<size_t>(C) * H * 3);
    VLM_CUDA_CHECK(cudaMemcpyAsync(host.data(), sums, host.size() * sizeof(double), cudaMemcpyDeviceToHost, stream));
    VLM_CUDA_CHECK(cudaStreamSynchronize(stream));
    auto& scores = table_.scores[layer];
    scores.assign(C, std::vector<PatternScore>(H));
    for (int ci = 0; ci < C; ++ci)
      for (int h = 0; h < H; ++h) {
        const double* s = host.data() + (static_cast<size_t>(ci) * H + h) * 2;
        scores[ci][h].error = std::sqrt(s[0] / std::max(s[1], 1e-30));
        scores[ci][h].density = host[static_cast<size_t>(C) * H * 2 + static_cast<size_t>(ci) * H + h] / causal_;
      }
    table_.layer_seconds[layer] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

 private:
  // Candidate ci's output into out_; returns the plan view it ran.
  cuda::SparsePlanView run(int ci, int layer, const void* q, DType act, int H, const PagedKVLayer& kv,
                           const cuda::CudaAttentionBatch& meta, float scale, cudaStream_t stream) {
    const SparsePrefillConfig sc = candidate_config(cands_[ci].pattern, block_);
    if (gpu_plans(cands_[ci].pattern, block_)) {
      batch_.sparse_prefill = {sc};
      sparse_.attention(layer, batch_, q, act, H, kv, meta, scale, out_.get(), stream);
      return sparse_.last_plan();
    }
    download(q, act, H, kv, stream);
    const int N = static_cast<int>(prompt_.ids.size());
    ChunkView cv{q_host_.data(), q_len_, N, N, table_ids_.data(), layer, prompt_.codes.data(), {}};
    const BlockSparsePlan plan = build_sparse_plan(sc, cv, H, k_layer_, scale);
    const BlockSparsePlan* pp = &plan;
    const int32_t cu[2] = {0, q_len_};
    host_plan_.upload({&pp, 1}, cu, H, stream);
    cuda::paged_block_sparse_attention(q, act, H, kv, meta, host_plan_, scale, out_.get(), stream);
    return host_plan_.view();
  }

  // This layer's q rows (f32) and the sequence's keys (the cache's dtype) on the host, once.
  // The search's block table is the identity: the sequence's blocks are [0, nb).
  void download(const void* q, DType act, int H, const PagedKVLayer& kv, cudaStream_t stream) {
    if (host_ready_) return;
    const int N = static_cast<int>(prompt_.ids.size()), D = kv.head_dim;
    const int64_t nb = (N + kv.block_size - 1) / kv.block_size;
    const int64_t n = static_cast<int64_t>(q_len_) * H * D;
    VLM_CHECK(act == DType::BF16 || act == DType::F16, "host planning of the GPU search needs bf16/f16, not {}",
              dtype_name(act));
    std::vector<uint16_t> raw(static_cast<size_t>(n));
    VLM_CUDA_CHECK(cudaMemcpyAsync(raw.data(), q, n * 2, cudaMemcpyDeviceToHost, stream));
    k_host_.resize(static_cast<size_t>(nb * kv.block_stride() * dtype_size(kv.dtype)));
    VLM_CUDA_CHECK(cudaMemcpyAsync(k_host_.data(), kv.k, k_host_.size(), cudaMemcpyDeviceToHost, stream));
    VLM_CUDA_CHECK(cudaStreamSynchronize(stream));
    q_host_.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) q_host_[i] = act == DType::BF16 ? bf16_to_f32(raw[i]) : f16_to_f32(raw[i]);
    k_layer_ = kv;
    k_layer_.k = k_layer_.v = k_host_.data();  // the planners read keys only
    k_layer_.num_blocks = nb;
    table_ids_.resize(nb);
    for (int64_t i = 0; i < nb; ++i) table_ids_[i] = static_cast<int32_t>(i);
    host_ready_ = true;
  }

  const PatternSearchPrompt& prompt_;
  const std::vector<PatternCandidate>& cands_;
  const int block_, q_len_;
  PatternSearchTable& table_;
  double causal_ = 1;
  ForwardBatch batch_;  // the probe's one-sequence view for CudaSparsePrefill
  CudaSparsePrefill sparse_;
  cuda::CudaBlockSparsePlan host_plan_;
  cuda::DeviceBuffer dense_, out_, sums_;
  bool host_ready_ = false;
  std::vector<float> q_host_;
  std::vector<uint8_t> k_host_;
  std::vector<int32_t> table_ids_;
  PagedKVLayer k_layer_;
};

}  // namespace

bool gpu_plans(const HeadPattern& pattern, int block) {
  return plannable_without_host_data(candidate_config(pattern, block));
}

PatternSearchTable search_patterns_cuda(const LlmDecoder& decoder, const PatternSearchPrompt& prompt,
                                        const std::vector<PatternCandidate>& cands,
                                        const CudaPatternSearchOptions& o, const std::function<void(int)>& progress) {
  const ModelConfig& c = decoder.config();
  const int N = static_cast<int>(prompt.ids.size()), L = static_cast<int>(c.num_layers);
  if (c.head_dim != 64 && c.head_dim != 128)
    throw LoadError(fmt::format("--device cuda: the GPU's block-sparse kernel takes head size 64 or 128, the model "
                                "has {}",
                                c.head_dim));
  if (o.block != 64) throw LoadError(fmt::format("--device cuda plans 64-token blocks, not {}", o.block));
  VLM_CHECK(o.chunk > 0 && N > 0, "chunk {} prompt {}", o.chunk, N);
  CudaDecoderOptions opt;
  opt.dtype = DType::BF16;
  opt.block_size = 16;
  const int64_t nb = (N + opt.block_size - 1) / opt.block_size;
  opt.num_kv_blocks = nb;
  opt.gpu_memory_utilization = o.gpu_memory_utilization;
  opt.max_tokens_per_step = std::min<int64_t>(o.chunk, N);
  opt.max_logit_rows = 1;
  opt.device = o.device;
  opt.enforce_eager = true;
  CudaDecoder gpu(decoder, opt);
  std::vector<int32_t> table(nb);
  for (int64_t i = 0; i < nb; ++i) table[i] = static_cast<int32_t>(i);

  PatternSearchTable result;
  result.scores.resize(L);
  result.layer_seconds.assign(L, 0.0);
  result.num_keys = N;
  const int64_t last = ((N - 1) / o.chunk) * o.chunk;  // the last chunk's first position
  result.probe_rows = static_cast<int>(N - last);
  LayerProbe probe(prompt, cands, o.block, result.probe_rows, result);
  for (int64_t start = 0; start < N; start += o.chunk) {
    const int64_t n = std::min<int64_t>(o.chunk, N - start);
    SequenceChunk ch;
    ch.token_ids = std::span<const int32_t>(prompt.ids).subspan(start, n);
    ch.start_pos = static_cast<int32_t>(start);
    ch.block_table = table;
    ch.logits = start + n == N ? LogitsFor::Last : LogitsFor::None;
    ch.modalities = std::span<const ModalityTag>(prompt.tags).subspan(start, n);
    const ForwardBatch fb = make_forward_batch({&ch, 1}, opt.block_size);
    if (start == last)
      gpu.set_attention_probe([&](int layer, const void* q, int H, const PagedKVLayer& kv,
                                  const cuda::CudaAttentionBatch& meta, float scale, cudaStream_t stream) {
        probe(layer, q, gpu.dtype(), H, kv, meta, scale, stream);
        if (progress) progress(layer);
      });
    gpu.forward(fb);
    VLM_CUDA_CHECK(cudaStreamSynchronize(gpu.stream()));
  }
  gpu.set_attention_probe({});
  return result;
}

}  // namespace vlm

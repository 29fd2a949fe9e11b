#include "model/layers/cuda/cuda_look_m_step.h"

#include <algorithm>
#include <memory>

#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/kv_compression/cuda_look_m.h"
#include "model/methods/look_m_state.h"

namespace vlm {

void CudaLookMStep::layer(int layer, const void* q, DType act, int num_heads, const PagedKVLayer& kv,
                          const ForwardBatch& b, const int32_t* block_tables, float scale, cudaStream_t stream) {
  if (b.look_m.empty()) return;
  VLM_CHECK(static_cast<int>(b.look_m.size()) == b.num_seqs(), "{} LOOK-M states for {} sequences", b.look_m.size(),
            b.num_seqs());
  const int64_t row = static_cast<int64_t>(num_heads) * kv.head_dim * static_cast<int64_t>(dtype_size(act));
  for (int s = 0; s < b.num_seqs(); ++s) {
    LookMState* st = b.look_m[static_cast<size_t>(s)];
    if (st == nullptr) continue;
    const int32_t t0 = b.cu_seqlens_q[s], q_len = b.cu_seqlens_q[s + 1] - t0;
    const int32_t S = b.context_lens[s], first = S - q_len;
    const bool last = b.finishes_prefill[static_cast<size_t>(s)] != 0;
    VLM_CHECK(S <= st->prefill_len && (!last || S == st->prefill_len) && kv.num_kv_heads == st->num_kv_heads &&
                  layer < st->num_layers,
              "LOOK-M: chunk ends at {} of a {}-token prefill (finishes: {}), layer {}", S, st->prefill_len, last, layer);
    const int64_t layer_floats = static_cast<int64_t>(st->num_kv_heads) * st->prefill_len;
    if (!st->device_scores) {  // freed with the state
      void* p = nullptr;
      // Stream-ordered: finish() releases it behind the step's work, without a sync.
      VLM_CUDA_CHECK(cudaMallocAsync(&p, static_cast<size_t>(layer_floats * st->num_layers) * 4, stream));
      st->device_scores = std::shared_ptr<void>(p, [stream](void* q) { cudaFreeAsync(q, stream); });
    }
    float* scores = static_cast<float*>(st->device_scores.get()) + layer * layer_floats;
    if (first == 0) VLM_CUDA_CHECK(cudaMemsetAsync(scores, 0, static_cast<size_t>(layer_floats) * 4, stream));
    int32_t r0 = 0, R = q_len;  // rows of the chunk that score
    if (st->params.scores == LookMScores::Window) {
      R = last ? std::min(st->params.window, q_len) : 0;
      r0 = q_len - R;
    }
    if (R == 0) continue;
    stats_.reserve(cuda::look_m_row_stats_bytes(R, num_heads, first + r0 + R));
    cuda::look_m_accumulate_scores(static_cast<const char*>(q) + (t0 + r0) * row, act, R, num_heads, kv,
                                   block_tables + static_cast<int64_t>(s) * b.max_blocks_per_seq, first + r0, scale,
                                   stats_.get(), scores, st->prefill_len, stream);
  }
}

void CudaLookMStep::finish(const ForwardBatch& b, const std::vector<PagedKVLayer>& kv, const int32_t* block_tables,
                           cudaStream_t stream) {
  bool any = false;
  for (size_t s = 0; s < b.look_m.size(); ++s) any |= b.look_m[s] != nullptr && b.finishes_prefill[s] != 0;
  if (!any) return;
  for (int s = 0; s < b.num_seqs(); ++s) {
    LookMState* st = b.look_m[static_cast<size_t>(s)];
    if (st == nullptr || !b.finishes_prefill[static_cast<size_t>(s)]) continue;
    const int32_t L = st->prefill_len;
    VLM_CHECK(st->device_scores != nullptr, "LOOK-M: no scores for a finishing prefill");
    const float* scores = static_cast<const float*>(st->device_scores.get());
    const LookMBudget budget = look_m_budget(st->params, L);
    const int32_t C = std::min(L, budget.kept());
    st->compressed_len = C;
    const int Hkv = st->num_kv_heads;
    if (C < L) {
      // Kept sets of every layer and head on the device: [layers, Hkv, C].
      is_text_.reserve(static_cast<size_t>(L));
      VLM_CUDA_CHECK(cudaMemcpyAsync(is_text_.get(), st->is_text.data(), static_cast<size_t>(L), cudaMemcpyHostToDevice,
                                     stream));
      kept_.reserve(static_cast<size_t>(st->num_layers) * Hkv * C * 4);
      cuda::look_m_select_kept(scores, L, st->num_layers * Hkv, is_text_.as<uint8_t>(), L, budget.recent,
                               budget.important, st->params.text_prior, st->params.num_sink_tokens, kept_.as<int32_t>(),
                               stream);
      work_.reserve(cuda::look_m_compact_workspace_bytes(L, C, Hkv, kv[0].head_dim));
      const int32_t* table = block_tables + static_cast<int64_t>(s) * b.max_blocks_per_seq;
      for (int l = 0; l < st->num_layers; ++l)
        cuda::look_m_compact(kv[static_cast<size_t>(l)], table, L,
                             kept_.as<int32_t>() + static_cast<int64_t>(l) * Hkv * C, C, st->params.merge, work_.get(),
                             stream);
    }
    // The scores to the state when it asked (LookMState::host_scores: tests, inspection), stream-ordered
    // after the selection; otherwise they stay on the device (44 MB at 98K tokens of a 7B model).
    if (!st->scores.empty())
      VLM_CUDA_CHECK(
          cudaMemcpyAsync(st->scores.data(), scores, st->scores.size() * 4, cudaMemcpyDeviceToHost, stream));
    st->device_scores.reset();  // cudaFreeAsync on the stream, behind the copy
  }
}

}  // namespace vlm

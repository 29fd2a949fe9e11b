#include "model/layers/cuda/cuda_look_m_step.h"

#include <algorithm>
#include <memory>

#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/kv_compression/cuda_look_m.h"
#include "model/methods/look_m_state.h"

namespace vlm {

void CudaLookMStep::layer(int layer, const void* q, DType act, int num_heads, const PagedKVLayer& kv,
                          const ForwardBatch& b, const int32_t* block_tables, float scale, cudaStream_t stream,
                          int rank, int ranks) {
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
    VLM_CHECK(S <= st->prefill_len && (!last || S == st->prefill_len) && layer < st->num_layers,
              "LOOK-M: chunk ends at {} of a {}-token prefill (finishes: {}), layer {}", S, st->prefill_len, last, layer);
    VLM_CHECK(kv.num_kv_heads * ranks == st->num_kv_heads,
              "LOOK-M: {} KV heads on each of {} ranks for a model of {} (under tensor parallelism the KV heads "
              "must be split, not replicated)",
              kv.num_kv_heads, ranks, st->num_kv_heads);
    if (ranks == 1 && st->device_scores.empty()) st->device_scores.resize(1);
    VLM_CHECK(static_cast<int>(st->device_scores.size()) >= ranks && rank < ranks,
              "LOOK-M: {} device score slots for rank {} of {}", st->device_scores.size(), rank, ranks);
    std::shared_ptr<void>& mine = st->device_scores[static_cast<size_t>(rank)];
    const int64_t layer_floats = static_cast<int64_t>(kv.num_kv_heads) * st->prefill_len;  // this rank's heads
    if (!mine) {  // freed with the state
      void* p = nullptr;
      int device = 0;
      VLM_CUDA_CHECK(cudaGetDevice(&device));
      // Stream-ordered: finish() releases it behind the step's work, without a sync. A state
      // dropped elsewhere (a preempted sequence, on the engine thread) frees it on its own GPU.
      VLM_CUDA_CHECK(cudaMallocAsync(&p, static_cast<size_t>(layer_floats * st->num_layers) * 4, stream));
      mine = std::shared_ptr<void>(p, [stream, device](void* q) {
        int current = device;
        cudaGetDevice(&current);
        if (current != device) cudaSetDevice(device);
        cudaFreeAsync(q, stream);
        if (current != device) cudaSetDevice(current);
      });
    }
    float* scores = static_cast<float*>(mine.get()) + layer * layer_floats;
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
                           cudaStream_t stream, int rank, int ranks) {
  bool any = false;
  for (size_t s = 0; s < b.look_m.size(); ++s) any |= b.look_m[s] != nullptr && b.finishes_prefill[s] != 0;
  if (!any) return;
  for (int s = 0; s < b.num_seqs(); ++s) {
    LookMState* st = b.look_m[static_cast<size_t>(s)];
    if (st == nullptr || !b.finishes_prefill[static_cast<size_t>(s)]) continue;
    const int32_t L = st->prefill_len;
    VLM_CHECK(static_cast<int>(st->device_scores.size()) > rank && st->device_scores[static_cast<size_t>(rank)],
              "LOOK-M: no scores for a finishing prefill (rank {})", rank);
    std::shared_ptr<void>& mine = st->device_scores[static_cast<size_t>(rank)];
    const float* scores = static_cast<const float*>(mine.get());  // [layers, Hkv, L], this rank's heads
    const LookMBudget budget = look_m_budget(st->params, L);
    const int32_t C = std::min(L, budget.kept());  // the same on every rank
    if (rank == 0) st->compressed_len = C;         // the other ranks' threads only read the state
    const int Hkv = kv[0].num_kv_heads;
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
    // Rank r writes its heads' rows [r * Hkv, (r + 1) * Hkv) of every layer's [model Hkv, L] (disjoint).
    if (!st->scores.empty()) {
      VLM_CHECK(st->scores.size() == static_cast<size_t>(st->num_layers) * st->num_kv_heads * L,
                "LOOK-M: host scores of {} floats", st->scores.size());
      const size_t row_bytes = static_cast<size_t>(Hkv) * L * 4;
      VLM_CUDA_CHECK(cudaMemcpy2DAsync(st->scores.data() + static_cast<size_t>(rank) * Hkv * L,
                                       static_cast<size_t>(st->num_kv_heads) * L * 4, scores, row_bytes, row_bytes,
                                       static_cast<size_t>(st->num_layers), cudaMemcpyDeviceToHost, stream));
    }
    mine.reset();  // cudaFreeAsync on the stream, behind the copy
  }
}

}  // namespace vlm

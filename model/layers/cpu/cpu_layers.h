// CpuLayers: the CPU implementation of the layer vocabulary — the exact f32 reference. Every
// layer calls the kernels (kernels/gemm, kernels/ops, kernels/attention) the pre-layer decoder
// called, in the same order, so results are bit-identical to it. Weights are views into the
// mapped checkpoint in their stored dtype (F32/BF16/F16); biases are f32 copies. Layouts: a
// Linear of several parts writes part i as a plane [M, N_i] after the previous parts' planes
// (the CPU attention reads q|k|v that way, the gated MLP gate|up). The attention's q/k norm
// (Qwen3) runs on those planes as rows of D: q [T*H, D], k [T*Hkv, D], in place, before RoPE.
#pragma once

#include "model/layers/layer_backend.h"

namespace vlm {

class CpuLayers final : public LayerBackend {
 public:
  std::unique_ptr<Embedding> embedding(const WeightSource& w, const WeightRef& table) override;
  std::unique_ptr<Norm> norm(const WeightSource& w, const NormSpec& spec) override;
  std::unique_ptr<Linear> linear(const WeightSource& w, const std::vector<LinearPart>& parts,
                                 const NormSpec* pre_norm) override;
  std::unique_ptr<Linear> tied_linear(const Embedding& table, const WeightSource& w, const NormSpec* pre_norm) override;
  std::unique_ptr<RopeTable> rope_table(const RopeConfig& rope) override;
  std::unique_ptr<CausalAttention> causal_attention(const WeightSource& w, const AttentionSpec& spec,
                                                    const RopeTable& rope) override;
  std::unique_ptr<Mlp> mlp(const WeightSource& w, const MlpSpec& spec) override;
  std::unique_ptr<SegmentAttention> segment_attention(const SegmentAttentionSpec& spec) override;
  std::unique_ptr<VisionRopeTable> vision_rope_table(const VisionRopeSpec& spec) override;
  std::unique_ptr<PatchEmbedding> patch_embedding(const WeightSource& w, const PatchEmbeddingSpec& spec) override;
  std::unique_ptr<RowOps> row_ops() override;
  std::unique_ptr<PositionTable> position_table(const WeightSource& w, const PositionTableSpec& spec) override;
  std::unique_ptr<LearnedRows> learned_rows(const WeightSource& w, const WeightRef& table) override;
  std::unique_ptr<Mlp> moe(const WeightSource& w, const MoeSpec& spec) override;  // cpu_moe.h
  std::unique_ptr<Collective> collective(Communicator& comm) override;
};

}  // namespace vlm

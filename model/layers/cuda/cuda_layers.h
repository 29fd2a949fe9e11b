// CudaLayers: the GPU implementation of the layer vocabulary: the decoder's layers (the
// mixture-of-experts block in cuda_moe.h), and the vision towers' (cuda_vision_layers.h;
// LayerNorm and the ungated MLPs here), which call the kernels the hand-written GPU towers
// (deleted in issue 39 step 5b) called, in their order, and Qwen3-VL's PositionTable. Weights
// are uploaded at construction, converted to the compute dtype (norm weights f32; biases in the
// compute dtype and in f32, as the output they are added to). The kernels and their choices are
// CudaDecoder's before the refactor: GEMVs for steps of at most kGemvMaxRows 16-bit rows (a
// pre-norm folded into them, gemv_norm.h, when CudaStep::fused_norm), cuBLASLt otherwise; the
// residual add in the GEMM/GEMV epilogue; gate/up with SiLU·mul fused into the GEMV. A vision
// step (CudaStep::gemv false) runs cuBLASLt GEMMs whatever its rows, as the towers did. Attention
// is the runner's (CudaAttentionRunner: the paged cache and the methods live there).
// FP8 (issue 43, CudaFp8 below): linear layers and gated MLPs over FP8 E4M3 weights
// (cuda_fp8_linear.h: the norm is not folded into their GEMVs).
#pragma once

#include <string>
#include <vector>

#include "model/layers/layer_backend.h"

namespace vlm {

struct DeviceLinear;

// Which linear layers run in FP8 (cuda_fp8_linear.h; the LM head never does, nor the
// non-gated MLPs of the vision towers): kNone: none (weights an FP8 checkpoint stores are
// dequantized and uploaded in dt: the vision towers); kStored: the layers whose weights the
// checkpoint stores in FP8 (the decoder's default); kAll: every linear layer and gated MLP
// (--quantization fp8). FP8 layers need dt BF16 (LoadError otherwise).
enum class CudaFp8 { kNone, kStored, kAll };

class CudaLayers final : public LayerBackend {
 public:
  explicit CudaLayers(DType dt, CudaFp8 fp8 = CudaFp8::kNone);
  DType dtype() const { return dt_; }
  int64_t weight_bytes() const { return bytes_; }  // uploaded so far

  std::unique_ptr<Embedding> embedding(const WeightSource& w, const WeightRef& table) override;
  std::unique_ptr<Norm> norm(const WeightSource& w, const NormSpec& spec) override;
  std::unique_ptr<Linear> linear(const WeightSource& w, const std::vector<LinearPart>& parts,
                                 const NormSpec* pre_norm) override;
  std::unique_ptr<Linear> tied_linear(const Embedding& table, const WeightSource& w, const NormSpec* pre_norm) override;
  std::unique_ptr<RopeTable> rope_table(const RopeConfig& rope) override;
  // Refuses a spec with Qwen3's q/k norm (not on the GPU yet).
  std::unique_ptr<CausalAttention> causal_attention(const WeightSource& w, const AttentionSpec& spec,
                                                    const RopeTable& rope) override;
  std::unique_ptr<Mlp> mlp(const WeightSource& w, const MlpSpec& spec) override;
  std::unique_ptr<Mlp> moe(const WeightSource& w, const MoeSpec& spec) override;  // cuda_moe.h
  std::unique_ptr<SegmentAttention> segment_attention(const SegmentAttentionSpec& spec) override;
  std::unique_ptr<VisionRopeTable> vision_rope_table(const VisionRopeSpec& spec) override;
  std::unique_ptr<RowOps> row_ops() override;
  std::unique_ptr<LearnedRows> learned_rows(const WeightSource& w, const WeightRef& table) override;
  std::unique_ptr<PatchEmbedding> patch_embedding(const WeightSource& w, const PatchEmbeddingSpec& spec) override;
  std::unique_ptr<PositionTable> position_table(const WeightSource& w, const PositionTableSpec& spec) override;
  std::unique_ptr<Collective> collective(Communicator& comm) override;  // cuda_collective.h

 private:
  // Whether the layer whose first part is `first` (profile label `label`) runs in FP8.
  bool fp8_layer(const WeightSource& w, const LinearPart& first, const std::string& label) const;
  DeviceLinear upload(const WeightSource& w, const std::vector<LinearPart>& parts, bool fp8);

  DType dt_;
  CudaFp8 fp8_;
  int64_t bytes_ = 0;
};

}  // namespace vlm

// LayerBackend: makes the layers of one backend (CpuLayers, later CudaLayers) from specs and a
// checkpoint. Weights are the layer's: a CPU layer keeps views into the mapped checkpoint, a GPU
// layer a converted copy in device memory. Throws LoadError for a missing tensor or a wrong shape
// (naming it), and for a spec the backend cannot run (naming the limit).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/core/communicator.h"
#include "kernels/ops/rope.h"
#include "model/layers/layer_specs.h"
#include "model/layers/layers.h"

namespace vlm {

class LayerBackend {
 public:
  virtual ~LayerBackend() = default;
  virtual std::unique_ptr<Embedding> embedding(const WeightSource& w, const WeightRef& table /*[V,C]*/) = 0;
  virtual std::unique_ptr<Norm> norm(const WeightSource& w, const NormSpec& spec) = 0;
  // pre_norm (or null): the norm the layer applies to its input first.
  virtual std::unique_ptr<Linear> linear(const WeightSource& w, const std::vector<LinearPart>& parts,
                                         const NormSpec* pre_norm = nullptr) = 0;
  // A linear layer over the embedding's table (a tied LM head), sharing its memory; pre_norm
  // (or null) read from w.
  virtual std::unique_ptr<Linear> tied_linear(const Embedding& table, const WeightSource& w,
                                              const NormSpec* pre_norm = nullptr) = 0;
  virtual std::unique_ptr<RopeTable> rope_table(const RopeConfig& rope) = 0;
  // The attention's own weights (spec.q_norm / k_norm, Qwen3) are read from w. A backend that
  // lacks a feature of the spec refuses it here (LoadError naming it and the layer).
  virtual std::unique_ptr<CausalAttention> causal_attention(const WeightSource& w, const AttentionSpec& spec,
                                                            const RopeTable& rope) = 0;
  virtual std::unique_ptr<Mlp> mlp(const WeightSource& w, const MlpSpec& spec) = 0;
  virtual std::unique_ptr<SegmentAttention> segment_attention(const SegmentAttentionSpec& spec) = 0;
  virtual std::unique_ptr<VisionRopeTable> vision_rope_table(const VisionRopeSpec& spec) = 0;
  virtual std::unique_ptr<PatchEmbedding> patch_embedding(const WeightSource& w, const PatchEmbeddingSpec& spec) = 0;
  virtual std::unique_ptr<RowOps> row_ops() = 0;
  // Qwen3-VL's interpolated position grid. A backend that implements it overrides this (CpuLayers
  // does); the default refuses (LoadError naming it), so a model needing it fails at load there.
  virtual std::unique_ptr<PositionTable> position_table(const WeightSource& w, const PositionTableSpec& spec) {
    (void)w;
    throw LoadError("this layer backend does not implement the interpolated position table (PositionTable, "
                    "Qwen3-VL's " + spec.table.name + ")");
  }
  // A mixture-of-experts block (MoeSpec), as an Mlp whose inner_cols() states its scratch. A
  // backend that implements it overrides this (CpuLayers does); the default refuses (LoadError
  // naming it and the router's tensor), so a model needing it fails at load there.
  virtual std::unique_ptr<Mlp> moe(const WeightSource& w, const MoeSpec& spec) {
    throw LoadError("this layer backend does not implement mixture-of-experts blocks (Moe, " +
                    std::to_string(spec.num_experts) + " experts, top " + std::to_string(spec.top_k) + ", router " +
                    w.prefix() + spec.router.name + ")");
  }
  // table: [n, C], or [C] read as one row.
  virtual std::unique_ptr<LearnedRows> learned_rows(const WeightSource& w, const WeightRef& table) = 0;
  // The collectives of tensor parallelism over `comm` (which must outlive them). A backend that
  // implements them overrides this; the default refuses (LoadError), so tensor parallelism on a
  // backend without them fails at load.
  virtual std::unique_ptr<Collective> collective(Communicator& comm) {
    throw LoadError("this layer backend does not implement tensor parallelism's collectives (" +
                    std::to_string(comm.size()) + " ranks)");
  }
};

}  // namespace vlm

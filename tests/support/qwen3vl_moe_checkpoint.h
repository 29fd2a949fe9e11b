// Qwen3-VL-MoE checkpoints written by the tests from the dense Qwen3-VL fixture
// (tests/fixtures/qwen3vl/qwen3_vl_tiny, transformers 5.17: 3 layers, C = 64, dense I = 128): its
// config made Qwen3VLMoeForConditionalGeneration's (8 experts, top 2) and the MLP of every layer
// the spec makes sparse replaced by a random router (bf16 [8, 64], "mlp.gate.weight") and experts
// in the asked-for layout: each a copy of the layer's dense MLP (identical: the model is then the
// dense one, the renormalised top-2 weights summing to 1), or random bf16 experts of I = 48.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/decoder/safetensors.h"
#include "model/layers/layer_specs.h"

namespace vlm::testing {

constexpr int64_t kQwen3VLMoeExperts = 8;

struct MoeCheckpointSpec {
  bool identical = true;  // experts = the layer's dense MLP (I = 128); else random (I = 48)
  ExpertLayout layout = ExpertLayout::PerExpert;
  int64_t sparse_step = 1;
  std::vector<int64_t> mlp_only = {1};
  std::function<void(nlohmann::json&)> edit_config;                       // applied last to config.json
  std::function<void(std::map<std::string, TensorView>&)> edit_tensors;  // applied last to the tensors
  bool is_moe(int64_t layer) const;
};

// Writes config.json and model.safetensors under a fresh temporary directory (named by `tag` and
// the process id), removed by the destructor. The random experts are the same in every layout.
class MoeCheckpoint {
 public:
  MoeCheckpoint(const MoeCheckpointSpec& spec, const std::string& tag);
  ~MoeCheckpoint();
  MoeCheckpoint(const MoeCheckpoint&) = delete;
  MoeCheckpoint& operator=(const MoeCheckpoint&) = delete;
  const std::string& dir() const { return dir_; }

 private:
  TensorView bf16(const std::vector<float>& v, Shape shape);
  std::string dir_;
  std::unique_ptr<SafetensorsFile> dense_;
  std::deque<std::vector<uint16_t>> owned_;
};

}  // namespace vlm::testing

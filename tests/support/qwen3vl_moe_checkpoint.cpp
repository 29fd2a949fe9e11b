#include "tests/support/qwen3vl_moe_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>

#include "kernels/core/dtype.h"
#include "tests/support/qwen3vl_fixture.h"

namespace vlm::testing {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int64_t kE = kQwen3VLMoeExperts, kK = 2, kC = 64, kDenseI = 128, kLayers = 3;

std::vector<float> values(const TensorView& t) {  // a bf16 tensor's values
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = bf16_to_f32(t.as<const uint16_t>()[i]);
  return v;
}

}  // namespace

bool MoeCheckpointSpec::is_moe(int64_t l) const {
  return std::find(mlp_only.begin(), mlp_only.end(), l) == mlp_only.end() && (l + 1) % sparse_step == 0;
}

// The dense fixture's checkpoint with its MoE layers' MLPs replaced by a router and experts
// (bf16), written under a fresh temporary directory.
MoeCheckpoint::MoeCheckpoint(const MoeCheckpointSpec& spec, const std::string& tag) {
  dir_ = (fs::temp_directory_path() / ("vlm_q3vlmoe_" + tag + "_" + std::to_string(::getpid()))).string();
  fs::create_directories(dir_);
  const std::string src = qwen3vl_model_dir();
  std::ifstream in(src + "/config.json");
  json cfg = json::parse(in);
  const int64_t I = spec.identical ? kDenseI : 48;
  cfg["architectures"] = {"Qwen3VLMoeForConditionalGeneration"};
  cfg["model_type"] = "qwen3_vl_moe";
  json& t = cfg["text_config"];
  t["model_type"] = "qwen3_vl_moe_text";
  t["num_experts"] = kE;
  t["num_experts_per_tok"] = kK;
  t["moe_intermediate_size"] = I;
  t["decoder_sparse_step"] = spec.sparse_step;
  t["mlp_only_layers"] = spec.mlp_only;
  if (spec.edit_config) spec.edit_config(cfg);
  std::ofstream(dir_ + "/config.json") << cfg.dump(1);
  dense_ = SafetensorsFile::open(src + "/model.safetensors");
  std::map<std::string, TensorView> out = dense_->tensors();
  std::mt19937 rng(static_cast<uint32_t>(I * 31));  // the same experts in every layout
  std::normal_distribution<float> n01(0.0f, 1.0f);
  for (int64_t l = 0; l < kLayers; ++l) {
    if (!spec.is_moe(l)) continue;
    const std::string p = "model.language_model.layers." + std::to_string(l) + ".mlp.";
    // Per expert [I, C] gate, [I, C] up, [C, I] down, as f32 values of bf16 numbers.
    std::vector<std::vector<float>> gate(kE), up(kE), down(kE);
    for (int64_t e = 0; e < kE; ++e) {
      if (spec.identical) {
        gate[e] = values(out.at(p + "gate_proj.weight"));
        up[e] = values(out.at(p + "up_proj.weight"));
        down[e] = values(out.at(p + "down_proj.weight"));
      } else {
        for (auto* v : {&gate[e], &up[e], &down[e]}) {
          v->resize(static_cast<size_t>(I * kC));
          for (float& x : *v) x = bf16_to_f32(f32_to_bf16(0.15f * n01(rng)));
        }
      }
    }
    for (const char* part : {"gate_proj.weight", "up_proj.weight", "down_proj.weight"}) out.erase(p + part);
    std::vector<float> router(static_cast<size_t>(kE * kC));
    for (float& x : router) x = 0.5f * n01(rng);
    out[p + "gate.weight"] = bf16(router, Shape{kE, kC});
    const std::string x = p + "experts.";
    if (spec.layout == ExpertLayout::PerExpert) {
      for (int64_t e = 0; e < kE; ++e) {
        out[x + std::to_string(e) + ".gate_proj.weight"] = bf16(gate[e], Shape{I, kC});
        out[x + std::to_string(e) + ".up_proj.weight"] = bf16(up[e], Shape{I, kC});
        out[x + std::to_string(e) + ".down_proj.weight"] = bf16(down[e], Shape{kC, I});
      }
      continue;
    }
    const bool tr = spec.layout == ExpertLayout::FusedTransposed;
    std::vector<float> gu(static_cast<size_t>(kE * 2 * I * kC)), dn(static_cast<size_t>(kE * kC * I));
    for (int64_t e = 0; e < kE; ++e)
      for (int64_t i = 0; i < I; ++i)
        for (int64_t c = 0; c < kC; ++c) {
          const float g = gate[e][i * kC + c], u = up[e][i * kC + c], d = down[e][c * I + i];
          if (tr) {  // [E, C, 2I], [E, I, C]
            gu[(e * kC + c) * 2 * I + i] = g;
            gu[(e * kC + c) * 2 * I + I + i] = u;
            dn[(e * I + i) * kC + c] = d;
          } else {  // [E, 2I, C], [E, C, I]
            gu[(e * 2 * I + i) * kC + c] = g;
            gu[(e * 2 * I + I + i) * kC + c] = u;
            dn[(e * kC + c) * I + i] = d;
          }
        }
    out[x + "gate_up_proj"] = bf16(gu, tr ? Shape{kE, kC, 2 * I} : Shape{kE, 2 * I, kC});
    out[x + "down_proj"] = bf16(dn, tr ? Shape{kE, I, kC} : Shape{kE, kC, I});
  }
  if (spec.edit_tensors) spec.edit_tensors(out);
  write_safetensors(dir_ + "/model.safetensors", out);
}

MoeCheckpoint::~MoeCheckpoint() {
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

TensorView MoeCheckpoint::bf16(const std::vector<float>& v, Shape shape) {
  std::vector<uint16_t>& b = owned_.emplace_back(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = f32_to_bf16(v[i]);
  return TensorView(b.data(), DType::BF16, shape);
}

}  // namespace vlm::testing

#include "tests/support/random_qwen2.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <vector>

#include "model/decoder/safetensors.h"

namespace vlm::testing {

std::string write_random_qwen2(const std::string& name, const RandomQwen2& m) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json")
      << R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": )" << m.vocab
      << R"(, "hidden_size": )" << m.hidden << R"(, "intermediate_size": )" << m.intermediate
      << R"(, "num_hidden_layers": )" << m.layers << R"(, "num_attention_heads": )" << m.heads
      << R"(, "num_key_value_heads": )" << m.kv_heads << R"(, "max_position_embeddings": )" << m.max_positions
      << R"(, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": true, "hidden_act": "silu"})";
  const int64_t C = m.hidden, I = m.intermediate, D = m.hidden / m.heads, Q = m.heads * D, KV = m.kv_heads * D;
  std::mt19937 rng(m.seed);
  std::normal_distribution<float> nd(0.f, 0.08f);
  std::map<std::string, std::vector<float>> data;
  std::map<std::string, TensorView> views;
  auto add = [&](const std::string& tensor, std::vector<int64_t> shape, bool ones = false) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    auto& v = data[tensor];
    v.resize(static_cast<size_t>(n));
    for (float& x : v) x = ones ? 1.f : nd(rng);
    Shape sh;
    for (int64_t s : shape) sh.dims[sh.ndim++] = s;
    views.emplace(tensor, TensorView(v.data(), DType::F32, sh));
  };
  add("model.embed_tokens.weight", {m.vocab, C});
  add("model.norm.weight", {C}, true);
  for (int l = 0; l < m.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {C}, true);
    add(p + "post_attention_layernorm.weight", {C}, true);
    add(p + "self_attn.q_proj.weight", {Q, C});
    add(p + "self_attn.k_proj.weight", {KV, C});
    add(p + "self_attn.v_proj.weight", {KV, C});
    add(p + "self_attn.q_proj.bias", {Q});
    add(p + "self_attn.k_proj.bias", {KV});
    add(p + "self_attn.v_proj.bias", {KV});
    add(p + "self_attn.o_proj.weight", {C, Q});
    add(p + "mlp.gate_proj.weight", {I, C});
    add(p + "mlp.up_proj.weight", {I, C});
    add(p + "mlp.down_proj.weight", {C, I});
  }
  write_safetensors(dir + "/model.safetensors", views);
  return dir;
}

}  // namespace vlm::testing

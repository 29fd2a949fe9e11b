// vlm-random-model: writes a Hugging Face-style checkpoint directory (config.json +
// model.safetensors) with random weights in the shape of a real model, for benchmarks and
// load tests without downloading anything.
//   vlm-random-model --out DIR [--preset tiny-qwen2|qwen2-0.5b|llama-3.2-1b|qwen2-7b|qwen3-8b|qwen3-30b-a3b]
//                    [--dtype bf16|f16|f32] [--layers N] [--seed S] [--std X] [--tokenizer-from DIR]
//                    [--threads N]
// --threads N > 1 draws the rows of each tensor on N threads, row r of tensor k from its own
// generator seeded (seed, k, r) (other numbers than the default single stream, as reproducible):
// minutes become seconds for a 7B shape.
// --tokenizer-from copies tokenizer.json and tokenizer_config.json from DIR (e.g. the Qwen3
// tokenizer that scripts/fetch_test_data.sh fetches), making a servable demo model.
// Weights ~ N(0, 0.02) (norm scales 1): the numbers are meaningless, the shapes and bytes real.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/core/tensor.h"
#include "model/decoder/model_config.h"
#include "model/decoder/safetensors.h"
#include "tools/common/cli_flags.h"

namespace {

using nlohmann::json;

json preset(const std::string& name) {
  if (name == "qwen2-0.5b")
    return {{"architectures", {"Qwen2ForCausalLM"}}, {"model_type", "qwen2"}, {"vocab_size", 151936},
            {"hidden_size", 896}, {"intermediate_size", 4864}, {"num_hidden_layers", 24},
            {"num_attention_heads", 14}, {"num_key_value_heads", 2}, {"max_position_embeddings", 32768},
            {"rms_norm_eps", 1e-6}, {"rope_theta", 1000000.0}, {"tie_word_embeddings", true},
            {"use_sliding_window", false}, {"hidden_act", "silu"}, {"bos_token_id", 151643},
            {"eos_token_id", 151645}};
  if (name == "tiny-qwen2")  // the demo and server-test model: Qwen2 vocabulary, tiny widths
    return {{"architectures", {"Qwen2ForCausalLM"}}, {"model_type", "qwen2"}, {"vocab_size", 151936},
            {"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 2},
            {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"max_position_embeddings", 4096},
            {"rms_norm_eps", 1e-6}, {"rope_theta", 1000000.0}, {"tie_word_embeddings", true},
            {"use_sliding_window", false}, {"hidden_act", "silu"}, {"bos_token_id", 151643},
            {"eos_token_id", 151645}};
  if (name == "qwen2-7b")
    return {{"architectures", {"Qwen2ForCausalLM"}}, {"model_type", "qwen2"}, {"vocab_size", 152064},
            {"hidden_size", 3584}, {"intermediate_size", 18944}, {"num_hidden_layers", 28},
            {"num_attention_heads", 28}, {"num_key_value_heads", 4}, {"max_position_embeddings", 32768},
            {"rms_norm_eps", 1e-6}, {"rope_theta", 1000000.0}, {"tie_word_embeddings", false},
            {"use_sliding_window", false}, {"hidden_act", "silu"}, {"bos_token_id", 151643},
            {"eos_token_id", 151645}};
  if (name == "qwen3-8b")  // Qwen3-8B's text shape (and Qwen3-VL-8B's decoder but for its M-RoPE)
    return {{"architectures", {"Qwen3ForCausalLM"}}, {"model_type", "qwen3"}, {"vocab_size", 151936},
            {"hidden_size", 4096}, {"intermediate_size", 12288}, {"num_hidden_layers", 36},
            {"num_attention_heads", 32}, {"num_key_value_heads", 8}, {"head_dim", 128},
            {"max_position_embeddings", 40960}, {"rms_norm_eps", 1e-6}, {"rope_theta", 1000000.0},
            {"tie_word_embeddings", false}, {"attention_bias", false}, {"hidden_act", "silu"},
            {"bos_token_id", 151643}, {"eos_token_id", 151645}};
  // Qwen3-30B-A3B's text shape (Qwen3-VL-30B-A3B's decoder but for its M-RoPE): 48 layers, all
  // MoE, 128 experts of 768, top 8 renormalised; experts written per expert, as the released
  // checkpoint stores them. ~61 GB in bf16 (use --threads).
  if (name == "qwen3-30b-a3b")
    return {{"architectures", {"Qwen3MoeForCausalLM"}}, {"model_type", "qwen3_moe"}, {"vocab_size", 151936},
            {"hidden_size", 2048}, {"intermediate_size", 6144}, {"num_hidden_layers", 48},
            {"num_attention_heads", 32}, {"num_key_value_heads", 4}, {"head_dim", 128},
            {"num_experts", 128}, {"num_experts_per_tok", 8}, {"moe_intermediate_size", 768},
            {"norm_topk_prob", true}, {"decoder_sparse_step", 1}, {"mlp_only_layers", json::array()},
            {"max_position_embeddings", 40960}, {"rms_norm_eps", 1e-6}, {"rope_theta", 1000000.0},
            {"tie_word_embeddings", false}, {"attention_bias", false}, {"hidden_act", "silu"},
            {"bos_token_id", 151643}, {"eos_token_id", 151645}};
  if (name == "llama-3.2-1b")
    return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", 128256},
            {"hidden_size", 2048}, {"intermediate_size", 8192}, {"num_hidden_layers", 16},
            {"num_attention_heads", 32}, {"num_key_value_heads", 8}, {"head_dim", 64},
            {"max_position_embeddings", 131072}, {"rms_norm_eps", 1e-5}, {"rope_theta", 500000.0},
            {"tie_word_embeddings", true}, {"hidden_act", "silu"}, {"bos_token_id", 128000},
            {"eos_token_id", {128001, 128008, 128009}},
            {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0},
                              {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}}}};
  std::fprintf(stderr, "unknown preset '%s' (tiny-qwen2, qwen2-0.5b, qwen2-7b, qwen3-8b, qwen3-30b-a3b, llama-3.2-1b)\n",
               name.c_str());
  std::exit(2);
}

const char* const kUsage =
    "usage: vlm-random-model --out DIR [--preset tiny-qwen2|qwen2-0.5b|qwen2-7b|qwen3-8b|qwen3-30b-a3b|llama-3.2-1b]\n"
    "         [--dtype bf16|f16|f32]\n"
    "         [--layers N] [--seed S] [--std SIGMA] [--tokenizer-from DIR]\n";

}  // namespace

int main(int argc, char** argv) {
  if (vlm::cli::help_requested(argc, argv)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::string out, preset_name = "qwen2-0.5b", dtype_name_arg = "bf16", tokenizer_from;
  float stddev = 0.02f;
  int layers = 0, threads = 1;
  unsigned seed = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) { std::fprintf(stderr, "%s needs a value\n", a.c_str()); return 2; }
    std::string v = argv[++i];
    if (a == "--out") out = v;
    else if (a == "--preset") preset_name = v;
    else if (a == "--dtype") dtype_name_arg = v;
    else if (a == "--layers") layers = std::atoi(v.c_str());
    else if (a == "--seed") seed = static_cast<unsigned>(std::atoi(v.c_str()));
    else if (a == "--std") stddev = static_cast<float>(std::atof(v.c_str()));
    else if (a == "--tokenizer-from") tokenizer_from = v;
    else if (a == "--threads") threads = std::max(1, std::atoi(v.c_str()));
    else { std::fprintf(stderr, "unknown argument %s\n", a.c_str()); return 2; }
  }
  vlm::DType dtype;
  if (out.empty() || !vlm::parse_float_dtype_name(dtype_name_arg, &dtype)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  json cfg = preset(preset_name);
  if (layers > 0) cfg["num_hidden_layers"] = layers;
  cfg["torch_dtype"] = dtype == vlm::DType::F32 ? "float32" : dtype == vlm::DType::F16 ? "float16" : "bfloat16";
  const vlm::ModelConfig c = vlm::ModelConfig::from_json(cfg, "preset " + preset_name);

  std::map<std::string, vlm::Tensor> owned;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  unsigned tensor_index = 0;
  auto add = [&](const std::string& name, vlm::Shape shape, bool ones = false) {
    vlm::Tensor t = vlm::Tensor::empty(shape, dtype);
    const auto width = static_cast<size_t>(shape[shape.ndim - 1]);
    const int64_t rows = shape.numel() / static_cast<int64_t>(width);
    // Rows [r0, r1) from `gen` (the single stream) or, with gen null, one generator per row.
    auto fill = [&](int64_t r0, int64_t r1, std::mt19937* gen) {
      std::vector<float> row(width);
      std::normal_distribution<float> dist(0.0f, stddev);
      for (int64_t r = r0; r < r1; ++r) {
        std::mt19937 own;
        if (!gen) {
          std::seed_seq sq{seed, tensor_index, static_cast<unsigned>(r)};
          own.seed(sq);
        }
        for (float& x : row) x = ones ? 1.0f : (gen ? normal(*gen) : dist(own));
        vlm::convert_from_f32(row.data(), dtype, static_cast<char*>(t.data()) + r * static_cast<int64_t>(width) * vlm::dtype_size(dtype),
                              static_cast<int64_t>(width));
      }
    };
    if (threads <= 1) {
      fill(0, rows, &rng);
    } else {
      std::vector<std::thread> pool;
      for (int k = 0; k < threads; ++k)
        pool.emplace_back(fill, rows * k / threads, rows * (k + 1) / threads, nullptr);
      for (std::thread& th : pool) th.join();
    }
    ++tensor_index;
    owned.emplace(name, std::move(t));
  };
  const int64_t C = c.hidden_size, I = c.intermediate_size, QD = c.num_heads * c.head_dim,
                KD = c.num_kv_heads * c.head_dim;
  add("model.embed_tokens.weight", {c.vocab_size, C});
  add("model.norm.weight", {C}, true);
  if (!c.tie_word_embeddings) add("lm_head.weight", {c.vocab_size, C});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {C}, true);
    add(p + "post_attention_layernorm.weight", {C}, true);
    add(p + "self_attn.q_proj.weight", {QD, C});
    add(p + "self_attn.k_proj.weight", {KD, C});
    add(p + "self_attn.v_proj.weight", {KD, C});
    add(p + "self_attn.o_proj.weight", {C, QD});
    if (c.qkv_bias) {
      add(p + "self_attn.q_proj.bias", {QD});
      add(p + "self_attn.k_proj.bias", {KD});
      add(p + "self_attn.v_proj.bias", {KD});
    }
    if (c.qk_norm) {  // Qwen3: per-head RMSNorm weights of q and k
      add(p + "self_attn.q_norm.weight", {c.head_dim}, true);
      add(p + "self_attn.k_norm.weight", {c.head_dim}, true);
    }
    if (c.moe.is_moe_layer(l)) {  // the router and each expert's gate / up / down (PerExpert layout)
      const int64_t E = c.moe.num_experts, EI = c.moe.intermediate_size;
      add(p + "mlp.gate.weight", {E, C});
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        add(x + "gate_proj.weight", {EI, C});
        add(x + "up_proj.weight", {EI, C});
        add(x + "down_proj.weight", {C, EI});
      }
      continue;
    }
    add(p + "mlp.gate_proj.weight", {I, C});
    add(p + "mlp.up_proj.weight", {I, C});
    add(p + "mlp.down_proj.weight", {C, I});
  }
  std::filesystem::create_directories(out);
  std::map<std::string, vlm::TensorView> views;
  int64_t bytes = 0;
  for (const auto& [name, t] : owned) {
    views.emplace(name, t.view());
    bytes += t.nbytes();
  }
  vlm::write_safetensors(out + "/model.safetensors", views);
  std::ofstream(out + "/config.json") << cfg.dump(2) << "\n";
  if (!tokenizer_from.empty())
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      std::filesystem::copy_file(tokenizer_from + "/" + f, out + "/" + f,
                                 std::filesystem::copy_options::overwrite_existing);
  std::printf("wrote %s: %s, %zu tensors, %.1f MiB\n", out.c_str(), preset_name.c_str(), views.size(),
              static_cast<double>(bytes) / (1 << 20));
  return 0;
}

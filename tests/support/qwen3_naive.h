// Qwen3 and Qwen3-MoE checkpoints written by the tests, a naive double-precision restatement of
// transformers' forward over them (modeling_qwen3.py / Qwen3MoeSparseMoeBlock as read: per-head
// RMSNorm of q and k over head_dim before RoPE, rotate_half RoPE, GQA, scale head_dim^-0.5; the MLP
// gated SiLU, or on MoE layers the softmax router, top-k (ties to the lower index), optional
// renormalisation and the weighted experts; tied or untied head), and our CPU decoder fed in
// chunks. Used by test_qwen3_naive.cpp and test_qwen3_moe_naive.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/scheduling/kv_cache.h"
#include "model/decoder/llm_decoder.h"

namespace vlm::testing {

struct Qwen3Shape {
  int64_t V = 96, C = 40, I = 72, L = 2, H = 4, Hkv = 2, D = 12;  // H * D = 48 != C
  bool tied = true, bias = false;
  // Qwen3MoeForCausalLM when E > 0: E experts of inner size MI, top K; layer l a MoE block iff l is
  // not in mlp_only and (l + 1) % sparse_step == 0.
  int64_t E = 0, K = 0, MI = 0, sparse_step = 1;
  bool norm_topk = false;
  std::vector<int64_t> mlp_only;
  ExpertLayout experts = ExpertLayout::PerExpert;  // how the file stores them
  bool is_moe_layer(int64_t l) const;
};

// The checkpoint's tensors as f32, by name (experts always per expert:
// "model.layers.N.mlp.experts.E.gate_proj.weight" ..., whatever the file holds), for the naive model.
struct Qwen3Checkpoint {
  Qwen3Shape s;
  std::string dir;
  std::map<std::string, std::vector<float>> t;
  const std::vector<float>& operator[](const std::string& n) const { return t.at(n); }
};

// Writes config.json and model.safetensors (f32) under a fresh temporary directory named `name`.
Qwen3Checkpoint write_qwen3_checkpoint(const Qwen3Shape& s, const std::string& name, uint32_t seed);

// Logits [T][V] of a whole prompt, naively in double.
std::vector<std::vector<double>> naive_qwen3_logits(const Qwen3Checkpoint& ck, const std::vector<int32_t>& ids);

// Our CPU decoder (LlmDecoder::load) over sequences fed in chunks.
struct Qwen3Runner {
  std::unique_ptr<LlmDecoder> dec;
  std::unique_ptr<KVCache> cache;
  explicit Qwen3Runner(const std::string& dir);
  // Feeds seqs[i] in chunks of chunk[i] tokens, all sequences in the same steps; every row's
  // logits per sequence, [T_i * V].
  std::vector<std::vector<float>> run(const std::vector<std::vector<int32_t>>& seqs, const std::vector<int32_t>& chunk);
};

// The largest over rows of ||ours_r - want_r|| / ||want_r||.
double max_row_rel(const std::vector<float>& ours, const std::vector<std::vector<double>>& want);

}  // namespace vlm::testing

// Rotary position embedding, HF style (rotate_half: the two halves of each head's rotary dims
// are the pair), with the rope_scaling types Llama-3.x and Qwen2 checkpoints use.
//   inv_freq[i] = 1 / theta^(2i / rotary_dim), i in [0, rotary_dim / 2), then per type:
//   default  -  unchanged;
//   linear   -  inv_freq / factor;
//   llama3   -  Llama-3.1 wavelength bands (factor, low_freq_factor, high_freq_factor,
//               original_max_position_embeddings);
//   yarn     -  YaRN ramp between beta_fast/beta_slow over original_max_position_embeddings,
//               and attention_factor (default 0.1 ln(factor) + 1) scaling cos and sin.
// Angles are float(position) * inv_freq[i] in f32, as transformers computes them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vlm {

enum class RopeType { Default, Linear, Llama3, Yarn };

struct RopeConfig {
  int head_dim = 0;
  int rotary_dim = 0;  // rotated dims per head (== head_dim unless partial rotary); 0 = head_dim
  double theta = 10000.0;
  RopeType type = RopeType::Default;
  double factor = 1.0;
  double low_freq_factor = 1.0;        // llama3
  double high_freq_factor = 4.0;       // llama3
  int64_t original_max_position = 0;   // llama3, yarn
  double beta_fast = 32.0;             // yarn
  double beta_slow = 1.0;              // yarn
  double attention_factor = 0.0;       // yarn; 0 = derive from factor (and mscale, mscale_all_dim)
  double mscale = 0.0;                 // yarn (DeepSeek style), 0 = unused
  double mscale_all_dim = 0.0;         // yarn (DeepSeek style), 0 = unused
  bool truncate = true;                // yarn: floor/ceil the correction range (HF default)
  // M-RoPE (Qwen2-VL): frequencies [0, s0) take the temporal position, the next s1 the height
  // and the next s2 the width position (sections sum to rotary_dim / 2). Empty: 1-D RoPE.
  std::vector<int> mrope_section;
  // Interleaved M-RoPE (Qwen3-VL, transformers' apply_interleaved_mrope): frequency j takes the
  // height position when j % 3 == 1 and j < 3 * s1, the width position when j % 3 == 2 and
  // j < 3 * s2, else the temporal one (T H W T H W ... T T). Only with mrope_section.
  bool mrope_interleaved = false;
};

const char* rope_type_name(RopeType t);

class RotaryEmbedding {
 public:
  // Checks the config (VLM_CHECK): head_dim > 0, rotary_dim even and <= head_dim, theta > 0 and
  // != 1, factor > 0 for scaled types, original_max_position > 0 for llama3 and yarn,
  // 0 < low_freq_factor < high_freq_factor for llama3.
  explicit RotaryEmbedding(const RopeConfig& cfg);

  const std::vector<float>& inv_freq() const { return inv_freq_; }  // [rotary_dim / 2]
  float attention_scaling() const { return attention_scaling_; }     // multiplies cos and sin

  // Rotates q[T, H, head_dim] and k[T, Hkv, head_dim] in place at positions[T]. q and k are
  // contiguous; only the first rotary_dim dims of each head change. T == 0 is a no-op.
  // Bit-identical to apply_ref() (neither fuses products into FMAs).
  void apply(float* q, int64_t num_q_heads, float* k, int64_t num_k_heads,
             const int32_t* positions, int64_t T) const;
  // The cos/sin that apply() uses, for positions[T], so one forward step can compute them once
  // and share them across all layers (as transformers does): table[t, 0:R/2] = cos,
  // table[t, R/2:R] = sin, attention_scaling included; R = rotary_dim.
  void cos_sin_table(const int32_t* positions, int64_t T, float* table /*[T, R]*/) const;
  // cos_sin_table() for 3-axis positions (M-RoPE): frequency i uses positions[t, a(i)], where
  // a(i) is mrope_axis(i): the mrope_section the frequency falls in, or the interleaved mapping
  // when mrope_interleaved (see RopeConfig). Requires mrope_section.
  void cos_sin_table_mrope(const int32_t* positions /*[T, 3]*/, int64_t T, float* table /*[T, R]*/) const;
  // The position axis (0 = t, 1 = h, 2 = w) frequency i in [0, rotary_dim / 2) takes under
  // M-RoPE. Requires mrope_section (3 sections summing to rotary_dim / 2).
  int mrope_axis(int64_t i) const;
  // apply() with a table from cos_sin_table() for the same positions; bit-identical to apply().
  void apply_cached(float* q, int64_t num_q_heads, float* k, int64_t num_k_heads,
                    const float* table /*[T, R]*/, int64_t T) const;
  // Naive reference of apply(): the same f32 arithmetic in plain loops, cos/sin recomputed for
  // every element.
  void apply_ref(float* q, int64_t num_q_heads, float* k, int64_t num_k_heads,
                 const int32_t* positions, int64_t T) const;

 private:
  RopeConfig cfg_;
  std::vector<float> inv_freq_;
  float attention_scaling_ = 1.0f;
};

}  // namespace vlm

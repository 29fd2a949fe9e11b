// MultimodalModel: a vision-language model as the engine runs it, a decoder (LlmDecoder) plus a
// media encoder whose outputs replace the input embeddings of the prompt's media tokens (the
// decoder's EmbeddingOverride). Implemented by LlavaModel (model/families/llava.h: square images,
// a fixed token count) and Qwen2VLModel (model/families/qwen2_vl.h: images and videos at their
// own resolution, a token count per item, M-RoPE positions).
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "model/decoder/llm_decoder.h"
#include "model/media/media_pixels.h"
#include "model/decoder/mrope_positions.h"

namespace vlm {

class MultimodalModel {
 public:
  virtual ~MultimodalModel() = default;

  virtual const LlmDecoder& decoder() const = 0;
  virtual bool accepts_video() const { return false; }
  // The vision tower's attention head size (0: none); the GPU's shape checks read it.
  virtual int64_t vision_head_dim() const { return 0; }
  // The placeholder token ids of image / video tokens in prompts (-1: none).
  virtual int32_t image_token_id() const = 0;
  virtual int32_t video_token_id() const { return -1; }

  // The prompt tokens item k occupies (rows of its embeddings). Throws RequestError (400, param
  // "messages") when the item's pixels do not fit the encoder (wrong size or layout), or the
  // model does not take its modality.
  virtual int64_t media_tokens(const MediaPixels& item, int k) const = 0;
  // Video: tokens of one temporal grid step (rows x cols after the merger); image: all of them.
  virtual int64_t tokens_per_frame(const MediaPixels& item) const { return media_tokens(item, 0); }

  // Planes per media row (EmbeddingOverride::num_planes): 1, or 1 + K with DeepStack (Qwen3-VL:
  // the decoder's config().deepstack_layers = K).
  virtual int64_t embedding_planes() const { return 1; }

  // Encodes items (checked by media_tokens) -> out[sum media_tokens, embedding_planes() * C], item
  // after item, C the decoder's hidden size (each row its planes side by side, plane 0 the input
  // embedding). Thread-safe (const); uses the kernels' thread pool.
  virtual void encode_media(std::span<const MediaPixels* const> items, float* out) const = 0;

  // The M-RoPE positions of a prompt holding `items` (prompt order), or nullopt for a model with
  // 1-D positions. Throws RequestError (400) when the placeholders do not match the items.
  virtual std::optional<MropePositions> mrope_positions(std::span<const int32_t> /*ids*/,
                                                        std::span<const MediaPixels> /*items*/) const {
    return std::nullopt;
  }
};

}  // namespace vlm

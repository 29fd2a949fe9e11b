// MultimodalModel: a vision-language model as the engine runs it, a decoder (LlmDecoder) plus an
// image encoder whose outputs replace the input embeddings of the prompt's image tokens (the
// decoder's EmbeddingOverride). Implemented by LlavaModel (model/families/llava.h).
#pragma once

#include <cstdint>

#include "model/llm_decoder.h"

namespace vlm {

class MultimodalModel {
 public:
  virtual ~MultimodalModel() = default;

  virtual const LlmDecoder& decoder() const = 0;
  // Rows of embeddings per image, i.e. the image tokens one image occupies in the prompt.
  virtual int64_t tokens_per_image() const = 0;
  // The side S of the square pixel input [3, S, S] encode_images() expects.
  virtual int image_size() const = 0;
  // The placeholder token id of image tokens in prompts.
  virtual int32_t image_token_id() const = 0;
  // pixels[N, 3, S, S] (preprocessed) -> embeddings out[N, tokens_per_image, C], C the decoder's
  // hidden size. Thread-safe (const); uses the kernels' thread pool.
  virtual void encode_images(const float* pixels, int64_t N, float* out) const = 0;
};

}  // namespace vlm

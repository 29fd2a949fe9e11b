// A prompt's tokens with their modality: text tokens, and runs of placeholder tokens whose
// embeddings come from a media item (image k) instead of the embedding table. The engine carries
// these tags into ForwardBatch for the modality-aware attention methods.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/modality.h"

namespace vlm {

struct MultimodalPrompt {
  std::vector<int32_t> token_ids;        // [S]
  std::vector<ModalityTag> modalities;   // [S] text, or image k (media_index k)
  std::vector<int32_t> media_offset;     // [S] row inside that item's embeddings, -1 for text
  int32_t num_media = 0;

  int64_t size() const { return static_cast<int64_t>(token_ids.size()); }
};

// Builds the tagged prompt of `ids` holding `num_images` images as runs of image_token_id.
// Accepts either form of the placeholder: already expanded by the processor (transformers >= 4.47
// LlavaProcessor writes tokens_per_image copies per image; every run must be exactly that long)
// or one placeholder per image (expanded here). Throws RequestError (400) when the placeholders
// match neither form for num_images images.
MultimodalPrompt expand_image_tokens(std::span<const int32_t> ids, int32_t image_token_id,
                                     int64_t tokens_per_image, int32_t num_images);

// Fills the input-embedding override of prompt rows [begin, begin + n): rows of media tokens get
// media_embeds[media_index][media_offset, :] (each item [tokens_per_item, C]) and use = 1; text
// rows get use = 0. embeds[n, C], use[n].
void gather_media_embeddings(const MultimodalPrompt& prompt, int64_t begin, int64_t n,
                             std::span<const float* const> media_embeds, int64_t C, float* embeds,
                             uint8_t* use);

}  // namespace vlm

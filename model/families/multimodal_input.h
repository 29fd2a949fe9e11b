// A prompt's tokens with their modality: text tokens, and runs of placeholder tokens whose
// embeddings come from a media item (image or video k) instead of the embedding table. The engine
// carries these tags into ForwardBatch for the modality-aware attention methods. Video tokens
// also know their frame: a video of grid (t, h, w) patches covers t temporal steps ("frames" of
// the merged grid, each temporal_patch_size input frames) of tokens_per_frame = h*w / merge^2
// tokens each, row-major (rows x cols after the merger) within a frame.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/decoder/modality.h"

namespace vlm {

struct MultimodalPrompt {
  std::vector<int32_t> token_ids;        // [S]
  std::vector<ModalityTag> modalities;   // [S] text, or image k (media_index k)
  std::vector<int32_t> media_offset;     // [S] row inside that item's embeddings, -1 for text
  int32_t num_media = 0;
  // [S] video tokens: the temporal grid index of the token's frame (media_offset /
  // tokens_per_frame of its item); -1 for text and image tokens. Empty from expand_image_tokens.
  std::vector<int32_t> frame;
  // [num_media] video: tokens per frame (rows x cols after the merger), what MMInference's grid
  // pattern needs; image: all of the item's tokens. Empty from expand_image_tokens.
  std::vector<int64_t> tokens_per_frame;

  int64_t size() const { return static_cast<int64_t>(token_ids.size()); }
};

// Builds the tagged prompt of `ids` holding `num_images` images as runs of image_token_id.
// Accepts either form of the placeholder: already expanded by the processor (transformers >= 4.47
// LlavaProcessor writes tokens_per_image copies per image; every run must be exactly that long)
// or one placeholder per image (expanded here). Throws RequestError (400) when the placeholders
// match neither form for num_images images.
MultimodalPrompt expand_image_tokens(std::span<const int32_t> ids, int32_t image_token_id,
                                     int64_t tokens_per_image, int32_t num_images);

// One media item as the prompt sees it.
struct MediaTokens {
  Modality modality = Modality::Image;  // Image or Video
  int64_t num_tokens = 0;               // prompt tokens (> 0)
  int64_t tokens_per_frame = 0;         // video: per temporal step; num_tokens holds whole frames and
                                        // possibly a tail (LLaVA-OneVision's newline, tagged to the
                                        // last frame); image: num_tokens
};

// Builds the tagged prompt of `ids` whose placeholders (image_token_id for images,
// video_token_id for videos) stand for `items` in prompt order. Accepts either form: one
// placeholder per item (the chat template's <|image_pad|> / <|video_pad|>, expanded here to
// num_tokens copies), or every item already expanded (a run of placeholders splits exactly into
// consecutive items of its modality). Throws RequestError (400, param "messages") when the
// placeholders match neither form (wrong count, or a placeholder of the other modality).
MultimodalPrompt expand_media_tokens(std::span<const int32_t> ids, int32_t image_token_id, int32_t video_token_id,
                                     std::span<const MediaTokens> items);

// Fills the input-embedding override of prompt rows [begin, begin + n): rows of media tokens get
// media_embeds[media_index][media_offset, :] (each item [tokens_per_item, C]) and use = 1; text
// rows get use = 0. embeds[n, C], use[n].
void gather_media_embeddings(const MultimodalPrompt& prompt, int64_t begin, int64_t n,
                             std::span<const float* const> media_embeds, int64_t C, float* embeds,
                             uint8_t* use);

}  // namespace vlm

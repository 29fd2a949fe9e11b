// The media of a request as the engine carries it: preprocessed items (images, videos), where
// each item's tokens sit in the prompt, and (Qwen2-VL family) the prompt's M-RoPE positions.
// Shared (read-only) by the request's sequences.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/scheduling/block_hash.h"
#include "model/media/media_pixels.h"
#include "model/decoder/mrope_positions.h"

namespace vlm {

using ImagePixels = MediaPixels;  // the LLaVA-era name: one preprocessed image

// A video's tokens in the prompt, for the attention methods' grid patterns.
struct VideoTokenSpan {
  int32_t media_index = 0;       // item k of the request
  int32_t first_token = 0;       // prompt position of its first token
  int32_t num_frames = 0;        // temporal grid steps t
  int64_t tokens_per_frame = 0;  // rows x cols after the merger; token first + f * tokens_per_frame + r * cols + c
};

struct MediaInputs {
  std::vector<MediaPixels> images;     // [N] media items (images and videos) in prompt order:
                                       // item k fills the prompt tokens tagged k
  std::vector<int32_t> first_token;    // [N] prompt position of item k's first token
  std::vector<int64_t> num_tokens;     // [N] item k covers [first_token[k], first_token[k] + num_tokens[k])
  std::vector<int64_t> embed_row;      // [N] row of item k's first embedding in the encoder output
  std::vector<int64_t> tokens_per_frame;  // [N] video: tokens per temporal step; image: num_tokens[k]
  std::optional<MropePositions> mrope;    // M-RoPE positions of the prompt (Qwen2-VL family), else none
  std::vector<BlockHash> item_keys;     // [N] media_item_key of item k (prefix caching)
  std::vector<int32_t> video_frame_tokens;  // [videos] tokens per frame of each video, prompt order
                                            // (the grid pattern's known strides)

  int32_t num_images() const { return static_cast<int32_t>(images.size()); }  // media items, all kinds
  int64_t total_tokens() const { return num_tokens.empty() ? 0 : embed_row.back() + num_tokens.back(); }
  // Prompt positions [begin, end) spanned by all media tokens (begin == end: none).
  int32_t begin() const { return first_token.empty() ? 0 : first_token.front(); }
  int32_t end() const {
    return first_token.empty() ? 0 : first_token.back() + static_cast<int32_t>(num_tokens.back());
  }
  // The videos' token spans, in prompt order (empty without videos).
  std::vector<VideoTokenSpan> video_spans() const {
    std::vector<VideoTokenSpan> out;
    for (size_t k = 0; k < images.size(); ++k)
      if (images[k].modality == Modality::Video)
        out.push_back({static_cast<int32_t>(k), first_token[k],
                       static_cast<int32_t>(num_tokens[k] / tokens_per_frame[k]), tokens_per_frame[k]});
    return out;
  }
};

}  // namespace vlm

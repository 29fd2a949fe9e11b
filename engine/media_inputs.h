// The media of a request as the engine carries it: preprocessed images, and where each image's
// tokens sit in the prompt. Shared (read-only) by the request's sequences.
#pragma once

#include <cstdint>
#include <vector>

namespace vlm {

// One preprocessed image: pixel_values as model/image_preprocess produces them.
struct ImagePixels {
  std::vector<float> data;  // [3, H, W]
  int height = 0;
  int width = 0;
};

struct MediaInputs {
  std::vector<ImagePixels> images;  // [N] image k fills the prompt tokens tagged image k
  std::vector<int32_t> first_token;  // [N] prompt position of image k's first token
  int64_t tokens_per_image = 0;      // Ti: image k covers [first_token[k], first_token[k] + Ti)

  int32_t num_images() const { return static_cast<int32_t>(images.size()); }
  // Prompt positions [begin, end) spanned by all image tokens (begin == end: none).
  int32_t begin() const { return first_token.empty() ? 0 : first_token.front(); }
  int32_t end() const {
    return first_token.empty() ? 0 : first_token.back() + static_cast<int32_t>(tokens_per_image);
  }
};

}  // namespace vlm

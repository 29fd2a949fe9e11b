// Which input modality a token carries. The prompt of a multimodal request interleaves text
// tokens with the embedding slots of images and video frames; sparse prefill (modality-aware
// patterns) and LOOK-M (text-prior eviction) read these tags per token.
#pragma once

#include <cstdint>

namespace vlm {

enum class Modality : uint8_t { Text = 0, Image = 1, Video = 2 };

const char* modality_name(Modality m);  // "text", "image", "video"

// The modality of one prompt token and, for image/video tokens, which media item of the
// request it belongs to (0-based, counted per request across images and videos); -1 for text.
struct ModalityTag {
  Modality modality = Modality::Text;
  int32_t media_index = -1;

  bool operator==(const ModalityTag&) const = default;
};

}  // namespace vlm

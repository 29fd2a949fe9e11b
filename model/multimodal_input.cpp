#include "model/multimodal_input.h"

#include <algorithm>
#include <string>

#include "kernels/check.h"

namespace vlm {

MultimodalPrompt expand_image_tokens(std::span<const int32_t> ids, int32_t image_token_id,
                                     int64_t tokens_per_image, int32_t num_images) {
  VLM_CHECK(tokens_per_image > 0 && num_images >= 0, "tokens_per_image {} num_images {}",
            tokens_per_image, num_images);
  // Runs of consecutive placeholders.
  std::vector<std::pair<size_t, size_t>> runs;  // [begin, end)
  for (size_t i = 0; i < ids.size();) {
    if (ids[i] != image_token_id) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < ids.size() && ids[j] == image_token_id) ++j;
    runs.emplace_back(i, j);
    i = j;
  }
  int64_t count = 0;
  for (auto [b, e] : runs) count += static_cast<int64_t>(e - b);
  const bool expanded = count == tokens_per_image * num_images &&
                        std::all_of(runs.begin(), runs.end(), [&](auto r) {
                          return static_cast<int64_t>(r.second - r.first) % tokens_per_image == 0;
                        });
  const bool single = count == num_images;
  if (!expanded && !single)
    throw RequestError(400, "invalid_request_error",
                       fmt::format("the prompt has {} image placeholder tokens for {} images (expected {} "
                                   "or {} per image)",
                                   count, num_images, num_images, tokens_per_image),
                       "messages");
  const int64_t per_placeholder = expanded ? 1 : tokens_per_image;
  MultimodalPrompt p;
  p.num_media = num_images;
  int64_t seen = 0;  // image tokens emitted so far
  for (int32_t id : ids) {
    if (id != image_token_id) {
      p.token_ids.push_back(id);
      p.modalities.push_back(ModalityTag{});
      p.media_offset.push_back(-1);
      continue;
    }
    for (int64_t r = 0; r < per_placeholder; ++r, ++seen) {
      p.token_ids.push_back(image_token_id);
      p.modalities.push_back(ModalityTag{Modality::Image, static_cast<int32_t>(seen / tokens_per_image)});
      p.media_offset.push_back(static_cast<int32_t>(seen % tokens_per_image));
    }
  }
  return p;
}

void gather_media_embeddings(const MultimodalPrompt& prompt, int64_t begin, int64_t n,
                             std::span<const float* const> media_embeds, int64_t C, float* embeds,
                             uint8_t* use) {
  VLM_CHECK(begin >= 0 && n >= 0 && begin + n <= prompt.size(), "rows [{}, {}) of a {}-token prompt",
            begin, begin + n, prompt.size());
  for (int64_t t = 0; t < n; ++t) {
    const int32_t m = prompt.modalities[begin + t].media_index;
    use[t] = m >= 0;
    if (m < 0) continue;
    VLM_CHECK(m < static_cast<int32_t>(media_embeds.size()), "media item {} of {}", m, media_embeds.size());
    const float* src = media_embeds[m] + static_cast<int64_t>(prompt.media_offset[begin + t]) * C;
    std::copy(src, src + C, embeds + t * C);
  }
}

}  // namespace vlm

#include "model/families/multimodal_input.h"

#include <algorithm>
#include <string>

#include "kernels/core/check.h"

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

MultimodalPrompt expand_media_tokens(std::span<const int32_t> ids, int32_t image_token_id, int32_t video_token_id,
                                     std::span<const MediaTokens> items) {
  auto token_of = [&](Modality m) { return m == Modality::Video ? video_token_id : image_token_id; };
  auto bad = [](const std::string& msg) { return RequestError(400, "invalid_request_error", msg, "messages"); };
  int64_t expected = 0;
  for (const MediaTokens& it : items) {
    VLM_CHECK(it.num_tokens > 0 && (it.modality == Modality::Image || it.modality == Modality::Video) &&
                  it.tokens_per_frame > 0 && it.num_tokens >= it.tokens_per_frame &&
                  (it.modality == Modality::Video || it.num_tokens == it.tokens_per_frame),
              "media item of {} tokens, {} per frame", it.num_tokens, it.tokens_per_frame);
    expected += it.num_tokens;
  }
  // Placeholder runs: [begin, end) of one token id.
  std::vector<std::pair<size_t, size_t>> runs;
  int64_t count = 0;
  for (size_t i = 0; i < ids.size();) {
    if (ids[i] != image_token_id && ids[i] != video_token_id) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < ids.size() && ids[j] == ids[i]) ++j;
    runs.emplace_back(i, j);
    count += static_cast<int64_t>(j - i);
    i = j;
  }
  // per_token[p] for placeholder p (in order): how many prompt tokens it becomes (0: continues an
  // expanded item), and which item it starts.
  const size_t N = items.size();
  bool expanded = count == expected;
  if (expanded) {  // each run must split exactly into consecutive items of its modality
    size_t k = 0;
    for (auto [b, e] : runs) {
      int64_t left = static_cast<int64_t>(e - b);
      while (left > 0 && k < N && ids[b] == token_of(items[k].modality) && items[k].num_tokens <= left)
        left -= items[k++].num_tokens;
      if (left != 0) {
        expanded = false;
        break;
      }
    }
    expanded = expanded && k == N;
  }
  bool single = !expanded && count == static_cast<int64_t>(N);
  if (single) {
    size_t k = 0;
    for (auto [b, e] : runs)
      for (size_t i = b; i < e; ++i, ++k)
        if (ids[i] != token_of(items[k].modality))
          throw bad(fmt::format("placeholder {} of the prompt is for {} input, and media item {} is {}", k,
                                ids[i] == video_token_id ? "video" : "image", k, modality_name(items[k].modality)));
  }
  if (!expanded && !single)
    throw bad(fmt::format("the prompt has {} media placeholder tokens for {} media items (expected {}, one per item, "
                          "or {} in all)",
                          count, N, N, expected));
  MultimodalPrompt p;
  p.num_media = static_cast<int32_t>(N);
  for (const MediaTokens& it : items) p.tokens_per_frame.push_back(it.tokens_per_frame);
  size_t k = 0;       // current item
  int64_t done = 0;   // tokens of item k emitted
  for (int32_t id : ids) {
    if (id != image_token_id && id != video_token_id) {
      p.token_ids.push_back(id);
      p.modalities.push_back(ModalityTag{});
      p.media_offset.push_back(-1);
      p.frame.push_back(-1);
      continue;
    }
    const int64_t n = expanded ? 1 : items[k].num_tokens;
    for (int64_t r = 0; r < n; ++r, ++done) {
      const MediaTokens& it = items[k];
      p.token_ids.push_back(id);
      p.modalities.push_back(ModalityTag{it.modality, static_cast<int32_t>(k)});
      p.media_offset.push_back(static_cast<int32_t>(done));
      // Tokens after the last whole frame (LLaVA-OneVision's newline) count to the last frame.
      const int64_t last = it.num_tokens / it.tokens_per_frame - 1;
      p.frame.push_back(it.modality == Modality::Video
                            ? static_cast<int32_t>(std::min(done / it.tokens_per_frame, last))
                            : -1);
    }
    if (done == items[k].num_tokens) {
      ++k;
      done = 0;
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

#include "engine/media_inputs.h"

#include <algorithm>
#include <map>

#include "kernels/core/check.h"

namespace vlm {

namespace {

// Distances between consecutive frames' first tokens -> how often each occurs.
std::map<int32_t, int> frame_gaps(const VideoTokenSpan& v) {
  std::map<int32_t, int> count;
  for (size_t f = 1; f < v.frame_first.size(); ++f) ++count[v.frame_first[f] - v.frame_first[f - 1]];
  return count;
}

}  // namespace

int32_t VideoTokenSpan::frame_period() const {
  const std::map<int32_t, int> count = frame_gaps(*this);
  int32_t best = static_cast<int32_t>(tokens_per_frame);
  int best_n = 0;
  for (const auto& kv : count)  // ascending distance: the smallest wins a tie
    if (kv.second > best_n) {
      best = kv.first;
      best_n = kv.second;
    }
  return best;
}

std::vector<VideoTokenSpan> video_token_spans(std::span<const MediaPixels> items, std::span<const int32_t> first_token,
                                              std::span<const int64_t> num_tokens,
                                              std::span<const int64_t> tokens_per_frame) {
  VLM_CHECK(first_token.size() == items.size() && num_tokens.size() == items.size() &&
                tokens_per_frame.size() == items.size(),
            "video spans of {} items with {} / {} / {} entries", items.size(), first_token.size(), num_tokens.size(),
            tokens_per_frame.size());
  std::vector<VideoTokenSpan> out;
  for (size_t k = 0; k < items.size(); ++k) {
    const MediaPixels& it = items[k];
    if (it.modality != Modality::Video) continue;
    const int64_t per = tokens_per_frame[k];
    VLM_CHECK(per > 0, "video item {}: {} tokens, {} per frame", k, num_tokens[k], per);
    // whole frames (LLaVA-OneVision's video ends in one newline token after its frames)
    const auto frames = static_cast<int32_t>(num_tokens[k] / per);
    const bool joins = k > 0 && !out.empty() && it.video_group > 0 &&
                       out.back().media_index + out.back().num_items == static_cast<int32_t>(k) &&
                       items[k - 1].video_group == it.video_group - 1 && out.back().tokens_per_frame == per;
    if (!joins) {
      VideoTokenSpan v;
      v.media_index = static_cast<int32_t>(k);
      v.num_items = 0;
      v.first_token = first_token[k];
      v.tokens_per_frame = per;
      out.push_back(std::move(v));
    }
    VideoTokenSpan& v = out.back();
    ++v.num_items;
    for (int32_t f = 0; f < frames; ++f)
      v.frame_first.push_back(first_token[k] + static_cast<int32_t>(f * per));
    v.num_frames += frames;
  }
  return out;
}

std::vector<int32_t> grid_known_strides(std::span<const VideoTokenSpan> spans) {
  std::vector<int32_t> out;
  for (const VideoTokenSpan& v : spans) {
    const int32_t period = v.frame_period();
    out.push_back(period);
    for (const auto& kv : frame_gaps(v))
      if (kv.first != period) out.push_back(kv.first);
  }
  return out;
}

}  // namespace vlm

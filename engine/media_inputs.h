// The media of a request as the engine carries it: preprocessed items (images, videos), where
// each item's tokens sit in the prompt, and (Qwen2-VL family) the prompt's M-RoPE positions.
// Shared (read-only) by the request's sequences.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "engine/scheduling/block_hash.h"
#include "model/media/media_pixels.h"
#include "model/decoder/mrope_positions.h"

namespace vlm {

using ImagePixels = MediaPixels;  // the LLaVA-era name: one preprocessed image

// A video's tokens in the prompt, for the attention methods' grid patterns. A video is one media
// item (Qwen2-VL family, LLaVA-OneVision: its frames back to back), or consecutive items that are
// the temporal groups of one video (Qwen3-VL: MediaPixels::video_group 0, 1, ..., each group's
// run of tokens after the timestamp text "<t seconds><|vision_start|>" and before
// "<|vision_end|>", which the prompt tags as text).
struct VideoTokenSpan {
  int32_t media_index = 0;       // its first item k of the request
  int32_t num_items = 1;         // items it spans (Qwen3-VL: one per temporal group; else 1)
  int32_t first_token = 0;       // prompt position of its first token
  int32_t num_frames = 0;        // temporal grid steps t (over all its items; whole frames of
                                 // num_tokens: LLaVA-OneVision's trailing newline token is not one)
  int64_t tokens_per_frame = 0;  // rows x cols after the merger
  // [num_frames] prompt position of each frame's first token: frame f's token (r, c) is at
  // frame_first[f] + r * cols + c. Back-to-back frames: first_token + f * tokens_per_frame;
  // Qwen3-VL: each group's item starts after the timestamp text, so the gaps hold that text.
  std::vector<int32_t> frame_first;
  // The video's period in prompt positions, the grid stride MMInference sees (ALGORITHMS.md §4.2):
  // the most common distance between consecutive frames' first tokens (the smallest on a tie),
  // i.e. tokens_per_frame plus the text between frames; tokens_per_frame for one frame.
  // Why the period and not spans without the text: the grid (kernels/sparse_prefill/grid.h)
  // groups every prompt position by (p - phase) mod stride, text included, so with the period as
  // stride a token keeps its spatial group in every frame and the timestamp text (at the same
  // offsets in every period) forms groups of its own; spans that skip the text would need a
  // permutation that leaves text in place, which the planners (CPU and GPU) do not have.
  int32_t frame_period() const;
};

// The videos of a request's media, in prompt order (empty without videos). items[k] is item k,
// first_token / num_tokens / tokens_per_frame as MediaInputs holds them. Item k joins the video of
// item k - 1 when both are videos, item k - 1 is that video's last item, its video_group is one
// more than item k - 1's (>= 0), and its frames have the same tokens per frame; else (an image,
// video_group -1 or 0, a gap in the groups) it starts a video of its own.
std::vector<VideoTokenSpan> video_token_spans(std::span<const MediaPixels> items, std::span<const int32_t> first_token,
                                              std::span<const int64_t> num_tokens,
                                              std::span<const int64_t> tokens_per_frame);

// The grid's known strides of these videos (ForwardBatch::frame_strides): per video, every distinct
// distance between consecutive frames' first tokens, its frame_period() first (a one-frame video:
// tokens_per_frame). A Qwen3-VL video whose timestamps change length (e.g. "<9.5 seconds>" then
// "<10.5 seconds>") has two periods; the grid search scores both.
std::vector<int32_t> grid_known_strides(std::span<const VideoTokenSpan> spans);

struct MediaInputs {
  std::vector<MediaPixels> images;     // [N] media items (images and videos) in prompt order:
                                       // item k fills the prompt tokens tagged k
  std::vector<int32_t> first_token;    // [N] prompt position of item k's first token
  std::vector<int64_t> num_tokens;     // [N] item k covers [first_token[k], first_token[k] + num_tokens[k])
  std::vector<int64_t> embed_row;      // [N] row of item k's first embedding in the encoder output
  std::vector<int64_t> tokens_per_frame;  // [N] video: tokens per temporal step; image: num_tokens[k]
  std::optional<MropePositions> mrope;    // M-RoPE positions of the prompt (Qwen2-VL family), else none
  std::vector<BlockHash> item_keys;     // [N] media_item_key of item k (prefix caching)
  std::vector<int32_t> video_frame_tokens;  // the grid pattern's known strides, prompt order:
                                            // grid_known_strides(video_spans()) (Qwen2-VL: the
                                            // tokens per frame of each video; Qwen3-VL: the
                                            // group period, timestamp text included)

  int32_t num_images() const { return static_cast<int32_t>(images.size()); }  // media items, all kinds
  int64_t total_tokens() const { return num_tokens.empty() ? 0 : embed_row.back() + num_tokens.back(); }
  // Prompt positions [begin, end) spanned by all media tokens (begin == end: none).
  int32_t begin() const { return first_token.empty() ? 0 : first_token.front(); }
  int32_t end() const {
    return first_token.empty() ? 0 : first_token.back() + static_cast<int32_t>(num_tokens.back());
  }
  // The videos' token spans, in prompt order (empty without videos): video_token_spans over images.
  std::vector<VideoTokenSpan> video_spans() const {
    return video_token_spans(images, first_token, num_tokens, tokens_per_frame);
  }
};

}  // namespace vlm

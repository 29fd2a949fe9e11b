// The videos of a request's media as the attention methods see them (engine/media_inputs.h):
// a Qwen2-VL video item is one video; consecutive Qwen3-VL group items (video_group 0, 1, ...)
// with the timestamp text between them are one video whose grid period counts that text; a new
// group 0, an image, or a gap in the groups starts another.
#include <gtest/gtest.h>

#include "engine/media_inputs.h"

namespace vlm {
namespace {

MediaPixels video(int32_t group) {
  MediaPixels m;
  m.modality = Modality::Video;
  m.video_group = group;
  return m;
}

MediaPixels image() { return MediaPixels{}; }

TEST(VideoTokenSpans, WholeVideoItemIsOneVideoOfBackToBackFrames) {
  const std::vector<MediaPixels> items = {image(), video(-1)};
  const auto spans = video_token_spans(items, std::vector<int32_t>{3, 20}, std::vector<int64_t>{4, 18},
                                       std::vector<int64_t>{4, 6});
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].media_index, 1);
  EXPECT_EQ(spans[0].num_items, 1);
  EXPECT_EQ(spans[0].first_token, 20);
  EXPECT_EQ(spans[0].num_frames, 3);
  EXPECT_EQ(spans[0].frame_first, (std::vector<int32_t>{20, 26, 32}));
  EXPECT_EQ(spans[0].frame_period(), 6);
  EXPECT_EQ(grid_known_strides(spans), std::vector<int32_t>{6});
}

TEST(VideoTokenSpans, TrailingTokensAfterTheFramesAreNotAFrame) {
  // LLaVA-OneVision: 4 frames of 9 tokens, then one newline token
  const std::vector<MediaPixels> items = {video(-1)};
  const auto spans = video_token_spans(items, std::vector<int32_t>{5}, std::vector<int64_t>{37}, std::vector<int64_t>{9});
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].num_frames, 4);
  EXPECT_EQ(grid_known_strides(spans), std::vector<int32_t>{9});
}

TEST(VideoTokenSpans, GroupItemsAreOneVideoWithTheTextBetweenInItsPeriod) {
  // groups of 6 tokens at 22, 36, 50 (8 text tokens between: "<|vision_end|>", a 6-token
  // timestamp, "<|vision_start|>"), then 9 tokens from 10.5 s on at 65 and 80.
  const std::vector<MediaPixels> items = {video(0), video(1), video(2), video(3), video(4)};
  const auto spans = video_token_spans(items, std::vector<int32_t>{22, 36, 50, 65, 80}, std::vector<int64_t>(5, 6),
                                       std::vector<int64_t>(5, 6));
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].media_index, 0);
  EXPECT_EQ(spans[0].num_items, 5);
  EXPECT_EQ(spans[0].num_frames, 5);
  EXPECT_EQ(spans[0].tokens_per_frame, 6);
  EXPECT_EQ(spans[0].frame_first, (std::vector<int32_t>{22, 36, 50, 65, 80}));
  EXPECT_EQ(spans[0].frame_period(), 14);  // 14 twice, 15 twice: the smaller on a tie
  EXPECT_EQ(grid_known_strides(spans), (std::vector<int32_t>{14, 15}));
}

TEST(VideoTokenSpans, NewGroupZeroImageOrGapStartsAnotherVideo) {
  // two videos of two groups back to back, then an image, then group 1 alone (after the image),
  // then groups 0 and 2 (a gap)
  const std::vector<MediaPixels> items = {video(0), video(1), video(0), video(1), image(), video(1), video(0), video(2)};
  const std::vector<int32_t> first = {10, 20, 40, 50, 60, 70, 90, 100};
  const auto spans = video_token_spans(items, first, std::vector<int64_t>(8, 4), std::vector<int64_t>(8, 4));
  ASSERT_EQ(spans.size(), 5u);
  EXPECT_EQ(spans[0].num_items, 2);
  EXPECT_EQ(spans[0].frame_period(), 10);
  EXPECT_EQ(spans[1].media_index, 2);
  EXPECT_EQ(spans[1].num_items, 2);
  EXPECT_EQ(spans[2].media_index, 5);
  EXPECT_EQ(spans[2].num_items, 1);
  EXPECT_EQ(spans[2].frame_period(), 4);  // one frame: its tokens per frame
  EXPECT_EQ(spans[3].media_index, 6);
  EXPECT_EQ(spans[4].media_index, 7);
  EXPECT_EQ(grid_known_strides(spans), (std::vector<int32_t>{10, 10, 4, 4, 4}));
}

TEST(VideoTokenSpans, GroupsOfDifferentFrameSizesAreDifferentVideos) {
  const std::vector<MediaPixels> items = {video(0), video(1)};
  const auto spans = video_token_spans(items, std::vector<int32_t>{0, 20}, std::vector<int64_t>{6, 12},
                                       std::vector<int64_t>{6, 12});
  EXPECT_EQ(spans.size(), 2u);
}

}  // namespace
}  // namespace vlm

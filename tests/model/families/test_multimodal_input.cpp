// expand_media_tokens: one placeholder per item or already-expanded runs, images and videos in
// prompt order, video tokens tagged with their frame; mismatches are 400s.
#include <gtest/gtest.h>

#include "kernels/core/check.h"
#include "model/families/multimodal_input.h"

namespace vlm {
namespace {

constexpr int32_t kImg = 7, kVid = 8;

TEST(ExpandMediaTokens, SinglePlaceholdersExpandWithFrames) {
  // text, image (3 tokens), text, video (2 frames of 2 tokens)
  const std::vector<int32_t> ids{1, kImg, 2, kVid, 3};
  const std::vector<MediaTokens> items{{Modality::Image, 3, 3}, {Modality::Video, 4, 2}};
  const MultimodalPrompt p = expand_media_tokens(ids, kImg, kVid, items);
  EXPECT_EQ(p.token_ids, (std::vector<int32_t>{1, kImg, kImg, kImg, 2, kVid, kVid, kVid, kVid, 3}));
  EXPECT_EQ(p.frame, (std::vector<int32_t>{-1, -1, -1, -1, -1, 0, 0, 1, 1, -1}));
  EXPECT_EQ(p.media_offset, (std::vector<int32_t>{-1, 0, 1, 2, -1, 0, 1, 2, 3, -1}));
  EXPECT_EQ(p.tokens_per_frame, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(p.modalities[6], (ModalityTag{Modality::Video, 1}));
  EXPECT_EQ(p.modalities[2], (ModalityTag{Modality::Image, 0}));
  // The expanded form gives the same prompt.
  const MultimodalPrompt e = expand_media_tokens(p.token_ids, kImg, kVid, items);
  EXPECT_EQ(e.token_ids, p.token_ids);
  EXPECT_EQ(e.modalities, p.modalities);
  EXPECT_EQ(e.frame, p.frame);
}

TEST(ExpandMediaTokens, AdjacentExpandedItemsSplitByCount) {
  const std::vector<MediaTokens> items{{Modality::Image, 2, 2}, {Modality::Image, 1, 1}};
  const MultimodalPrompt p = expand_media_tokens(std::vector<int32_t>{kImg, kImg, kImg, 5}, kImg, kVid, items);
  EXPECT_EQ(p.modalities[1], (ModalityTag{Modality::Image, 0}));
  EXPECT_EQ(p.modalities[2], (ModalityTag{Modality::Image, 1}));
}

TEST(ExpandMediaTokens, MismatchesAre400) {
  auto expect_400 = [](std::vector<int32_t> ids, std::vector<MediaTokens> items, const char* what) {
    try {
      expand_media_tokens(ids, kImg, kVid, items);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const RequestError& e) {
      EXPECT_EQ(e.status(), 400) << what;
    }
  };
  expect_400({1, kImg, 2}, {{Modality::Image, 3, 3}, {Modality::Image, 3, 3}}, "one placeholder for two images");
  expect_400({1, kVid, 2}, {{Modality::Image, 3, 3}}, "a video placeholder for an image");
  expect_400({1, kImg, kVid}, {{Modality::Video, 2, 1}, {Modality::Image, 2, 2}}, "items out of order");
  expect_400({kVid, kVid, kVid}, {{Modality::Video, 4, 2}}, "an expanded run one token short");
  expect_400({1, 2}, {{Modality::Image, 1, 1}}, "no placeholder");
}

}  // namespace
}  // namespace vlm

// ModelRunner::make_batch: what the decoder sees for a mixed step, including modality tags,
// finishes_prefill, logits rows, and a sequence whose cache was trimmed (position != slot).
#include <gtest/gtest.h>

#include <memory>

#include "engine/model_runner.h"
#include "engine/scheduling/scheduler.h"

namespace vlm {
namespace {

TEST(ModelRunner, FlattensAMixedStep) {
  BlockManager bm(16, 4);
  Scheduler sched(SchedulerConfig{8, 64, 0, 8}, bm);
  std::vector<ModalityTag> tags(6);
  tags[2] = tags[3] = ModalityTag{Modality::Image, 0};
  tags[4] = ModalityTag{Modality::Video, 1};
  Sequence a(1, {10, 11, 12, 13, 14, 15}, SamplingParams{}, tags);
  Sequence b(2, {20, 21, 22, 23, 24, 25, 26, 27, 28, 29}, SamplingParams{});
  sched.add(&a);
  const ForwardBatch fa = ModelRunner::make_batch(sched.schedule(), 4);
  EXPECT_EQ(fa.modalities[2], (ModalityTag{Modality::Image, 0}));
  EXPECT_EQ(fa.modalities[4], (ModalityTag{Modality::Video, 1}));
  EXPECT_EQ(fa.modalities[5], ModalityTag{});
  EXPECT_EQ(fa.finishes_prefill, (std::vector<uint8_t>{1}));
  a.token_ids.push_back(16);  // a sampled a token
  // LOOK-M compacted a's 6 cache slots into 3.
  bm.trim(a, 3);
  sched.add(&b);
  const SchedulerOutput out = sched.schedule();  // a decodes, b prefills
  const ForwardBatch fb = ModelRunner::make_batch(out, 4);
  ASSERT_EQ(fb.num_seqs(), 2);
  EXPECT_EQ(fb.token_ids, (std::vector<int32_t>{16, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29}));
  EXPECT_EQ(fb.positions[0], 6) << "RoPE position is the logical length";
  EXPECT_EQ(fb.slot_mapping[0], a.block_table[0] * 4 + 3) << "the slot follows the compacted cache";
  EXPECT_EQ(fb.context_lens, (std::vector<int32_t>{4, 10}));
  EXPECT_EQ(fb.cu_seqlens_q, (std::vector<int32_t>{0, 1, 11}));
  EXPECT_EQ(fb.logits_indices, (std::vector<int32_t>{0, 10}));
  EXPECT_EQ(fb.finishes_prefill, (std::vector<uint8_t>{0, 1}));
  for (int i = 1; i < 11; ++i) EXPECT_EQ(fb.slot_mapping[i], b.block_table[(i - 1) / 4] * 4 + (i - 1) % 4);
  EXPECT_EQ(fb.modalities[0], ModalityTag{}) << "outputs are text";
  sched.abort(&a);
  sched.abort(&b);
}

TEST(ModelRunner, ChunkThatDoesNotSampleGetsNoLogitsRow) {
  BlockManager bm(16, 4);
  Scheduler sched(SchedulerConfig{8, 5, 0, 8}, bm);
  Sequence a(1, std::vector<int32_t>(12, 3), SamplingParams{});
  sched.add(&a);
  const ForwardBatch fb = ModelRunner::make_batch(sched.schedule(), 4);
  EXPECT_EQ(fb.num_tokens(), 5);
  EXPECT_TRUE(fb.logits_indices.empty());
  EXPECT_EQ(fb.finishes_prefill, (std::vector<uint8_t>{0}));
  sched.abort(&a);
}

TEST(ModelRunner, SparsePrefillChunksCarryPromptTagsAndVideoFrameStrides) {
  BlockManager bm(16, 4);
  Scheduler sched(SchedulerConfig{8, 64, 0, 8}, bm);
  std::vector<ModalityTag> tags(10);
  for (int i = 2; i < 8; ++i) tags[i] = ModalityTag{Modality::Video, 0};
  Sequence a(1, std::vector<int32_t>(10, 5), SamplingParams{}, tags);
  auto media = std::make_shared<MediaInputs>();
  media->video_frame_tokens = {3};  // one video of 2 frames x 3 tokens
  a.media = media;
  Sequence b(2, std::vector<int32_t>(6, 7), SamplingParams{});  // text: no known strides
  sched.add(&a);
  sched.add(&b);
  SparsePrefillConfig sparse;
  sparse.method = SparsePrefillMethod::Grid;
  sparse.min_prompt_len = 0;
  const ForwardBatch fb = ModelRunner::make_batch(sched.schedule(), 4, &sparse);
  ASSERT_EQ(fb.sparse_prefill.size(), 2u);
  ASSERT_EQ(fb.frame_strides.size(), 2u);
  EXPECT_EQ(std::vector<int32_t>(fb.frame_strides[0].begin(), fb.frame_strides[0].end()), std::vector<int32_t>{3});
  EXPECT_TRUE(fb.frame_strides[1].empty());
  ASSERT_EQ(fb.prompt_modalities[0].size(), 10u);
  EXPECT_EQ(fb.prompt_modalities[0][2], (ModalityTag{Modality::Video, 0}));
  // each sequence's grid-layout store (grid_search_once keeps its layouts there across chunks)
  ASSERT_EQ(fb.grid_layouts.size(), 2u);
  EXPECT_EQ(fb.grid_layouts[0], &a.sparse_grid_layouts);
  EXPECT_EQ(fb.grid_layouts[1], &b.sparse_grid_layouts);
  sched.abort(&a);
  sched.abort(&b);
}

}  // namespace
}  // namespace vlm

// BlockManager on its own: paired predicates, reference counts, copy-on-write after a fork,
// trim, integrity checks that catch corruption, and the loud leak report.
#include <gtest/gtest.h>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>

#include "engine/scheduling/block_manager.h"
#include "kernels/core/check.h"

namespace vlm {
namespace {

Sequence make_seq(int64_t id, int32_t len) { return Sequence(id, std::vector<int32_t>(len, 1), SamplingParams{}); }

// Grows a sequence's cache by n slots as the scheduler would.
void append(BlockManager& bm, Sequence& s, int32_t n, std::vector<BlockCopy>& copies) {
  ASSERT_TRUE(bm.can_append(s, n));
  bm.append_slots(s, n, copies);
  s.num_cached_tokens += n;
  s.num_computed_tokens += n;
}

TEST(BlockManager, AllocateAppendFree) {
  BlockManager bm(8, 4);
  Sequence a = make_seq(1, 10);
  EXPECT_EQ(bm.num_blocks_needed(a, 10), 3);
  ASSERT_TRUE(bm.can_allocate(a, 10));
  bm.allocate(a, 10);
  a.num_cached_tokens = a.num_computed_tokens = 10;
  EXPECT_EQ(a.block_table.size(), 3u);
  EXPECT_EQ(bm.num_free_blocks(), 5);
  std::vector<BlockCopy> copies;
  append(bm, a, 2, copies);  // slots 10, 11: still block 3
  EXPECT_EQ(a.block_table.size(), 3u);
  append(bm, a, 1, copies);  // slot 12: a fourth block
  EXPECT_EQ(a.block_table.size(), 4u);
  EXPECT_TRUE(copies.empty());
  const Sequence* live[] = {&a};
  bm.check_integrity(live);
  EXPECT_FALSE(bm.can_append(a, 4 * 4 + 4));  // 33 slots need 9 blocks > 8
  EXPECT_THROW(bm.append_slots(a, 4 * 4 + 4, copies), InternalError);
  bm.free(a);
  EXPECT_TRUE(a.block_table.empty());
  EXPECT_EQ(bm.num_free_blocks(), 8);
  bm.check_integrity({});
}

TEST(BlockManager, CanAllocateIsFalseWhenFullOrAlreadyAllocated) {
  BlockManager bm(2, 16);
  Sequence a = make_seq(1, 40), b = make_seq(2, 5);
  EXPECT_FALSE(bm.can_allocate(a, 40));  // 3 blocks
  EXPECT_THROW(bm.allocate(a, 40), InternalError);
  EXPECT_TRUE(a.block_table.empty());
  ASSERT_TRUE(bm.can_allocate(a, 32));
  bm.allocate(a, 32);
  EXPECT_FALSE(bm.can_allocate(a, 1)) << "a sequence with blocks cannot allocate again";
  EXPECT_FALSE(bm.can_allocate(b, 5));
  bm.free(a);
}

TEST(BlockManager, ForkSharesBlocksAndCopiesTheSharedPartialBlockOnWrite) {
  BlockManager bm(8, 4);
  Sequence parent = make_seq(1, 6), child = make_seq(2, 6);
  bm.allocate(parent, 6);
  parent.num_cached_tokens = parent.num_computed_tokens = 6;
  bm.fork(parent, child);
  child.num_computed_tokens = 6;
  EXPECT_EQ(child.block_table, parent.block_table);
  EXPECT_EQ(bm.ref_count(parent.block_table[0]), 2);
  EXPECT_EQ(bm.ref_count(parent.block_table[1]), 2);
  EXPECT_EQ(bm.num_used_blocks(), 2);
  const Sequence* live[] = {&parent, &child};
  bm.check_integrity(live);

  // Slot 6 lands in the shared second block: the writer gets a private copy.
  EXPECT_EQ(bm.num_blocks_needed(child, 1), 1);
  std::vector<BlockCopy> copies;
  const int32_t shared = child.block_table[1];
  append(bm, child, 1, copies);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, shared);
  EXPECT_EQ(copies[0].dst, child.block_table[1]);
  EXPECT_NE(child.block_table[1], shared);
  EXPECT_EQ(child.block_table[0], parent.block_table[0]) << "full prompt blocks stay shared";
  EXPECT_EQ(bm.ref_count(shared), 1);
  // The parent is now the only owner: it writes in place.
  copies.clear();
  append(bm, parent, 1, copies);
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(parent.block_table[1], shared);
  bm.check_integrity(live);
  bm.free(parent);
  EXPECT_EQ(bm.ref_count(child.block_table[0]), 1);
  bm.free(child);
  EXPECT_EQ(bm.num_used_blocks(), 0);
}

TEST(BlockManager, ForkAtABlockBoundaryNeedsNoCopy) {
  BlockManager bm(8, 4);
  Sequence parent = make_seq(1, 8), child = make_seq(2, 8);
  bm.allocate(parent, 8);
  parent.num_cached_tokens = parent.num_computed_tokens = 8;
  bm.fork(parent, child);
  child.num_computed_tokens = 8;
  std::vector<BlockCopy> copies;
  append(bm, child, 1, copies);
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(child.block_table.size(), 3u);
  bm.free(parent);
  bm.free(child);
}

TEST(BlockManager, TrimFreesTailBlocks) {
  BlockManager bm(8, 4);
  Sequence a = make_seq(1, 20);
  bm.allocate(a, 20);
  a.num_cached_tokens = a.num_computed_tokens = 20;
  bm.trim(a, 9);  // LOOK-M compacted 20 slots into 9: 3 blocks remain
  EXPECT_EQ(a.num_cached_tokens, 9);
  EXPECT_EQ(a.num_computed_tokens, 20) << "the logical length is untouched";
  EXPECT_EQ(a.block_table.size(), 3u);
  EXPECT_EQ(bm.num_free_blocks(), 5);
  const Sequence* live[] = {&a};
  bm.check_integrity(live);
  EXPECT_THROW(bm.trim(a, 10), InternalError) << "trim cannot grow";
  std::vector<BlockCopy> copies;
  append(bm, a, 4, copies);  // slots 9..12 at logical positions 20..23
  EXPECT_EQ(a.block_table.size(), 4u);
  bm.check_integrity(live);
  bm.free(a);
}

TEST(BlockManager, IntegrityCheckCatchesCorruption) {
  BlockManager bm(4, 4);
  Sequence a = make_seq(1, 8), b = make_seq(2, 4);
  bm.allocate(a, 8);
  a.num_cached_tokens = a.num_computed_tokens = 8;
  const Sequence* only_a[] = {&a};
  bm.check_integrity(only_a);
  // A table that claims a block it does not own.
  b.block_table = {a.block_table[0]};
  b.num_cached_tokens = b.num_computed_tokens = 4;
  const Sequence* both[] = {&a, &b};
  EXPECT_THROW(bm.check_integrity(both), InternalError);
  // A table too short for its cache length.
  a.num_cached_tokens = 9;
  a.num_computed_tokens = 9;
  EXPECT_THROW(bm.check_integrity(only_a), InternalError);
  a.num_cached_tokens = a.num_computed_tokens = 8;
  // A live block missing from every table.
  EXPECT_THROW(bm.check_integrity({}), InternalError);
  bm.free(a);
  bm.check_integrity({});
}

TEST(BlockManager, DestructorReportsLeakedBlocks) {
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  auto logger = std::make_shared<spdlog::logger>("capture", sink);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  {
    BlockManager bm(8, 4);
    Sequence a = make_seq(1, 9);
    bm.allocate(a, 9);
  }
  spdlog::set_default_logger(previous);
  EXPECT_NE(log.str().find("KV block leak: BlockManager destroyed with 3 of 8 blocks still referenced"),
            std::string::npos)
      << log.str();
}

}  // namespace
}  // namespace vlm

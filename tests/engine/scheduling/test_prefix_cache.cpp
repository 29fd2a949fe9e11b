// The prefix cache inside the BlockManager: a repeated prompt hits every full block (the last
// token is always left to compute); a changed token, a changed image, a different media order or
// another cache_salt misses from the block that differs on; reference counts of shared hits;
// freed blocks stay cached and are evicted least recently freed first, a sequence's tail first;
// what a sequence may publish; reset; and the integrity check over all of it.
#include <gtest/gtest.h>
#include <algorithm>

#include <memory>
#include <numeric>

#include "engine/scheduling/block_manager.h"
#include "kernels/core/check.h"

namespace vlm {
namespace {

constexpr int B = 4;

std::vector<int32_t> iota_tokens(int32_t n, int32_t first = 100) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

Sequence make_seq(int64_t id, std::vector<int32_t> tokens) { return Sequence(id, std::move(tokens), SamplingParams{}); }

// Admits the sequence as the scheduler does (hits, then its whole remaining prompt in one
// chunk), runs it (publishes its full blocks) and returns the number of hit blocks.
int32_t admit_and_run(BlockManager& bm, Sequence& s) {
  const int32_t hits = bm.match_prefix(s);
  const int32_t n = s.num_tokens() - hits * bm.block_size();
  EXPECT_TRUE(bm.can_allocate(s, n, hits));
  bm.allocate(s, n, hits);
  EXPECT_EQ(s.num_computed_tokens, hits * bm.block_size());
  s.num_computed_tokens += n;
  s.num_cached_tokens += n;
  bm.cache_full_blocks(s);
  return hits;
}

void check(const BlockManager& bm, std::initializer_list<const Sequence*> live) {
  std::vector<const Sequence*> v(live);
  bm.check_integrity(v);
}

TEST(PrefixCache, RepeatedPromptHitsEveryFullBlock) {
  BlockManager bm(16, B, true);
  Sequence a = make_seq(1, iota_tokens(14));  // 3 full blocks and 2 tokens
  EXPECT_EQ(admit_and_run(bm, a), 0);
  EXPECT_EQ(bm.num_cached_blocks(), 3);
  check(bm, {&a});
  Sequence b = make_seq(2, iota_tokens(14));
  EXPECT_EQ(admit_and_run(bm, b), 3);
  EXPECT_EQ(std::vector<int32_t>(b.block_table.begin(), b.block_table.begin() + 3),
            std::vector<int32_t>(a.block_table.begin(), a.block_table.begin() + 3));
  EXPECT_NE(b.block_table[3], a.block_table[3]) << "the partial block is private";
  for (int i = 0; i < 3; ++i) EXPECT_EQ(bm.ref_count(a.block_table[static_cast<size_t>(i)]), 2);
  EXPECT_EQ(bm.prefix_cache_stats().queries, 28);
  EXPECT_EQ(bm.prefix_cache_stats().hits, 12);
  check(bm, {&a, &b});
  bm.free(a);
  check(bm, {&b});
  bm.free(b);
  check(bm, {});
  EXPECT_EQ(bm.num_free_blocks(), 16) << "cached blocks count as free";
  EXPECT_EQ(bm.num_cached_blocks(), 3);

  // A prompt of exactly 3 blocks: the last block is recomputed (something must sample).
  Sequence c = make_seq(3, iota_tokens(12));
  EXPECT_EQ(admit_and_run(bm, c), 2);
  bm.free(c);
  check(bm, {});
}

TEST(PrefixCache, ChangedTokenMissesFromItsBlockOn) {
  BlockManager bm(16, B, true);
  Sequence a = make_seq(1, iota_tokens(17));
  admit_and_run(bm, a);
  bm.free(a);
  for (int32_t pos : {0, 3, 4, 9, 15}) {
    std::vector<int32_t> t = iota_tokens(17);
    t[static_cast<size_t>(pos)] = 7;
    Sequence s = make_seq(10 + pos, t);
    EXPECT_EQ(bm.match_prefix(s), pos / B) << "token " << pos << " changed";
  }
  // The same tokens after another prefix hit nothing: hashes are chained.
  std::vector<int32_t> shifted = iota_tokens(17);
  const std::vector<int32_t> head = iota_tokens(B, 0);
  shifted.insert(shifted.begin(), head.begin(), head.end());
  Sequence s = make_seq(30, shifted);
  EXPECT_EQ(bm.match_prefix(s), 0);
  check(bm, {});
}

TEST(PrefixCache, CacheSaltSeparatesRequests) {
  BlockManager bm(16, B, true);
  Sequence a = make_seq(1, iota_tokens(13));
  a.prefix_cache_seed = prefix_cache_seed("tenant-a");
  admit_and_run(bm, a);
  bm.free(a);
  Sequence b = make_seq(2, iota_tokens(13));
  b.prefix_cache_seed = prefix_cache_seed("tenant-b");
  EXPECT_EQ(bm.match_prefix(b), 0);
  Sequence c = make_seq(3, iota_tokens(13));
  c.prefix_cache_seed = prefix_cache_seed("tenant-a");
  EXPECT_EQ(bm.match_prefix(c), 3);
  Sequence d = make_seq(4, iota_tokens(13));  // no salt
  EXPECT_EQ(bm.match_prefix(d), 0);
}

// Two media items: item 0 on tokens [5, 11), item 1 on [14, 18) of a 22-token prompt.
std::shared_ptr<MediaInputs> two_items(BlockHash k0, BlockHash k1) {
  auto m = std::make_shared<MediaInputs>();
  m->first_token = {5, 14};
  m->num_tokens = {6, 4};
  m->embed_row = {0, 6};
  m->item_keys = {k0, k1};
  return m;
}

MediaPixels pixels(float v) {
  MediaPixels p;
  p.data.assign(3 * 8 * 8, v);
  p.height = p.width = 8;
  return p;
}

Sequence media_seq(int64_t id, std::shared_ptr<MediaInputs> m) {
  Sequence s = make_seq(id, iota_tokens(22));
  for (int32_t k = 0; k < 2; ++k)
    for (int32_t i = 0; i < m->num_tokens[static_cast<size_t>(k)]; ++i)
      s.token_ids[static_cast<size_t>(m->first_token[static_cast<size_t>(k)] + i)] = 9;  // placeholders
  s.media = std::move(m);
  return s;
}

// Bulk inputs (patch rows) hash in four interleaved lanes: every byte still counts, in order.
TEST(PrefixCache, BulkBytesHashSeesEveryByteAndItsPlace) {
  std::vector<unsigned char> bytes(Hasher128::kLanesFromBytes * 3 + 13);  // whole 32-byte blocks and a tail
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 131 + 7);
  auto key = [](const std::vector<unsigned char>& b, size_t n) { return Hasher128().add_bytes(b.data(), n).digest(); };
  const BlockHash base = key(bytes, bytes.size());
  EXPECT_EQ(base, key(bytes, bytes.size())) << "deterministic";
  for (size_t at : {size_t(0), size_t(7), size_t(8), size_t(31), size_t(32), size_t(1000), bytes.size() - 14,
                    bytes.size() - 1}) {
    std::vector<unsigned char> b = bytes;
    b[at] ^= 1;
    EXPECT_NE(key(b, b.size()), base) << "byte " << at << " changed";
  }
  std::vector<unsigned char> swapped = bytes;  // two words of different lanes swap places
  std::swap_ranges(swapped.begin() + 64, swapped.begin() + 72, swapped.begin() + 72);
  EXPECT_NE(key(swapped, swapped.size()), base) << "words swapped across lanes";
  std::vector<unsigned char> moved = bytes;  // the same word moves within a lane
  std::swap_ranges(moved.begin() + 64, moved.begin() + 72, moved.begin() + 96);
  EXPECT_NE(key(moved, moved.size()), base) << "words swapped within a lane";
  EXPECT_NE(key(bytes, bytes.size() - 1), base) << "a shorter input";
  EXPECT_NE(key(bytes, Hasher128::kLanesFromBytes), key(bytes, Hasher128::kLanesFromBytes - 1));
}

TEST(PrefixCache, MediaIdentityIsPartOfTheBlocksThatHoldItsTokens) {
  const BlockHash A = media_item_key(pixels(0.25f)), Bk = media_item_key(pixels(0.5f)),
                  C = media_item_key(pixels(0.75f));
  EXPECT_EQ(A, media_item_key(pixels(0.25f))) << "the same pixels, the same key";
  MediaPixels other_grid = pixels(0.25f);
  other_grid.height = 4, other_grid.width = 16;
  EXPECT_NE(A, media_item_key(other_grid)) << "same values in another shape";

  BlockManager bm(32, B, true);
  Sequence a = media_seq(1, two_items(A, Bk));
  admit_and_run(bm, a);  // 5 full blocks
  bm.free(a);
  Sequence same = media_seq(2, two_items(A, Bk));
  EXPECT_EQ(bm.match_prefix(same), 5);
  // Item 0 starts in block 1: a different image there misses from block 1 on.
  Sequence img0 = media_seq(3, two_items(C, Bk));
  EXPECT_EQ(bm.match_prefix(img0), 1);
  // Item 1 starts in block 3 (tokens 12..15): misses from block 3 on.
  Sequence img1 = media_seq(4, two_items(A, C));
  EXPECT_EQ(bm.match_prefix(img1), 3);
  // The same two images in the other order: the first media block differs.
  Sequence swapped = media_seq(5, two_items(Bk, A));
  EXPECT_EQ(bm.match_prefix(swapped), 1);
  check(bm, {});
}

TEST(PrefixCache, FreedBlocksStayCachedAndAreEvictedLeastRecentlyFreedTailFirst) {
  BlockManager bm(8, B, true);
  Sequence a = make_seq(1, iota_tokens(12, 100));  // 3 full blocks
  admit_and_run(bm, a);
  const std::vector<int32_t> a_blocks = a.block_table;
  Sequence b = make_seq(2, iota_tokens(8, 500));  // 2 full blocks, freed later
  admit_and_run(bm, b);
  bm.free(a);
  bm.free(b);
  // Unhashed blocks first, then a's blocks tail first, then b's.
  const std::vector<int32_t> q = bm.free_queue();
  ASSERT_EQ(q.size(), 8u);
  EXPECT_EQ(q[3], a_blocks[2]);
  EXPECT_EQ(q[4], a_blocks[1]);
  EXPECT_EQ(q[5], a_blocks[0]);
  for (size_t i = 0; i < 3; ++i) EXPECT_FALSE(bm.is_cached(q[i]));
  // A new sequence needing 4 fresh blocks takes the 3 unhashed ones and evicts a's tail block.
  Sequence c = make_seq(3, iota_tokens(16, 900));
  ASSERT_TRUE(bm.can_allocate(c, 16));
  bm.allocate(c, 16);
  c.num_computed_tokens = c.num_cached_tokens = 16;
  EXPECT_EQ(bm.prefix_cache_stats().evicted, 1);
  EXPECT_FALSE(bm.is_cached(a_blocks[2]));
  check(bm, {&c});
  Sequence a2 = make_seq(4, iota_tokens(12, 100));
  EXPECT_EQ(bm.match_prefix(a2), 2) << "a's first two blocks survived";
  Sequence b2 = make_seq(5, iota_tokens(9, 500));
  EXPECT_EQ(bm.match_prefix(b2), 2);
  // Taking b's cached blocks, which count as free, leaves room only for what remains.
  EXPECT_EQ(bm.num_free_blocks(), 4);
  EXPECT_TRUE(bm.can_allocate(b2, 1, 2));  // 2 cached free blocks + 1 fresh = 3 of 4
  bm.allocate(b2, 1, 2);
  b2.num_computed_tokens = b2.num_cached_tokens = 9;
  EXPECT_EQ(bm.num_free_blocks(), 1);
  check(bm, {&c, &b2});
  bm.free(c);
  bm.free(b2);
  check(bm, {});
}

TEST(PrefixCache, PublishLimitAndDuplicates) {
  BlockManager bm(16, B, true);
  Sequence a = make_seq(1, iota_tokens(13));
  a.prefix_cache_publish_limit = 6;  // only block 0 lies wholly below token 6
  admit_and_run(bm, a);
  EXPECT_EQ(bm.num_cached_blocks(), 1);
  // Computed at the same time by two sequences: the first one publishes, the other stays private.
  Sequence x = make_seq(2, iota_tokens(9, 300)), y = make_seq(3, iota_tokens(9, 300));
  bm.allocate(x, 9);
  bm.allocate(y, 9);
  x.num_computed_tokens = x.num_cached_tokens = y.num_computed_tokens = y.num_cached_tokens = 9;
  bm.cache_full_blocks(x);
  bm.cache_full_blocks(y);
  EXPECT_TRUE(bm.is_cached(x.block_table[0]));
  EXPECT_FALSE(bm.is_cached(y.block_table[0]));
  check(bm, {&a, &x, &y});
  // A sequence that does not read the cache (LOOK-M) hits nothing.
  Sequence r = make_seq(4, iota_tokens(9, 300));
  r.reads_prefix_cache = false;
  EXPECT_EQ(bm.match_prefix(r), 0);
  bm.free(a), bm.free(x), bm.free(y);
  check(bm, {});
}

TEST(PrefixCache, ForkedChoicesShareAndPublishOnce) {
  BlockManager bm(16, B, true);
  Sequence p = make_seq(1, iota_tokens(6));
  admit_and_run(bm, p);
  Sequence c = make_seq(2, iota_tokens(6));
  c.block_hashes = p.block_hashes;
  bm.fork(p, c);
  c.num_computed_tokens = p.num_computed_tokens;
  check(bm, {&p, &c});
  // Both decode two tokens: each gets a private copy of the shared partial block; block 1
  // fills up in both, and both try to publish it: one is cached, the other stays private.
  for (Sequence* s : {&p, &c}) {
    std::vector<BlockCopy> copies;
    s->token_ids.push_back(1), s->token_ids.push_back(2);
    bm.append_slots(*s, 2, copies);
    s->num_cached_tokens += 2, s->num_computed_tokens += 2;
    bm.cache_full_blocks(*s);
  }
  EXPECT_EQ(bm.num_cached_blocks(), 2);
  check(bm, {&p, &c});
  bm.free(p), bm.free(c);
  check(bm, {});
}

TEST(PrefixCache, ResetForgetsEveryHashAndOffCachesNothing) {
  BlockManager bm(16, B, true);
  Sequence a = make_seq(1, iota_tokens(13));
  admit_and_run(bm, a);
  EXPECT_EQ(bm.reset_prefix_cache(), 3);
  check(bm, {&a});
  bm.free(a);
  Sequence b = make_seq(2, iota_tokens(13));
  EXPECT_EQ(bm.match_prefix(b), 0);

  BlockManager off(16, B, false);
  Sequence c = make_seq(3, iota_tokens(13));
  EXPECT_EQ(admit_and_run(off, c), 0);
  EXPECT_EQ(off.num_cached_blocks(), 0);
  off.free(c);
  Sequence d = make_seq(4, iota_tokens(13));
  EXPECT_EQ(off.match_prefix(d), 0);
  EXPECT_EQ(off.prefix_cache_stats().queries, 0);
  check(off, {});
}

TEST(PrefixCache, IntegrityCatchesATableThatDisagreesWithTheCache) {
  BlockManager bm(16, B, true);
  Sequence a = make_seq(1, iota_tokens(9));
  admit_and_run(bm, a);
  // Another sequence's tokens claiming a's cached blocks (a's table, a's counts).
  std::vector<int32_t> t = iota_tokens(9);
  t[0] = 1;
  Sequence wrong = make_seq(2, t);
  extend_block_hashes(wrong, B);
  wrong.block_table = a.block_table;
  wrong.num_computed_tokens = wrong.num_cached_tokens = a.num_cached_tokens;
  std::vector<const Sequence*> live = {&wrong};
  EXPECT_THROW(bm.check_integrity(live), InternalError);
  live = {&a};
  bm.check_integrity(live);
  bm.free(a);
}

}  // namespace
}  // namespace vlm

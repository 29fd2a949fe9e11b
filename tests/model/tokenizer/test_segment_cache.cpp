// The tokenizer's segment cache (model/tokenizer/segment_cache.h): encoding a chat whose history
// was encoded before reuses the earlier messages' segments and gives exactly the ids of a cold
// encoding (Qwen3 and Llama-2 vocabularies, real tokenizer files); a changed message misses; a
// segment's ids at the start of the text are not reused elsewhere (the "first" flag of
// Metaspace's prepend scheme); the LRU keeps within its byte budget.
#include <gtest/gtest.h>

#include <string>

#include "model/tokenizer/segment_cache.h"
#include "model/tokenizer/tokenizer.h"

namespace vlm {
namespace {

std::unique_ptr<Tokenizer> load(const std::string& name) {
  return Tokenizer::load(std::string(VLM_FIXTURES_DIR) + "/../data/tokenizers/" + name);
}

std::string chat(int turns) {
  std::string s = "<|im_start|>system\nYou are a helpful assistant. Ünïcode, 数字 123 and   spaces.<|im_end|>\n";
  for (int t = 0; t < turns; ++t)
    s += "<|im_start|>user\nQuestion " + std::to_string(t) + ": what is " + std::to_string(t * 7919) +
         " times two? Explain it step by step.<|im_end|>\n<|im_start|>assistant\nIt is " +
         std::to_string(t * 15838) + ".<|im_end|>\n";
  return s + "<|im_start|>assistant\n";
}

std::vector<int32_t> cold(const Tokenizer& tok, const std::string& text) {
  tok.clear_cache();
  return tok.encode(text);
}

TEST(SegmentCache, GrowingChatHistoryEncodesExactlyAsCold) {
  const auto tok = load("qwen3");
  for (int turns = 1; turns <= 6; ++turns) {
    const std::string text = chat(turns);
    const std::vector<int32_t> want = cold(*tok, text);
    tok->encode(chat(turns - 1));  // the history, as the turn before sent it
    const size_t cached = tok->num_cached_segments();
    EXPECT_GT(cached, 0u);
    EXPECT_EQ(tok->encode(text), want) << turns << " turns";
    EXPECT_EQ(tok->encode(text), want) << turns << " turns, all segments cached";
  }
  std::string changed = chat(4);
  changed[changed.find("Question 2") + 9] = '9';  // one message differs: its segment misses
  const std::vector<int32_t> want = cold(*tok, changed);
  tok->encode(chat(4));
  EXPECT_EQ(tok->encode(changed), want);
}

TEST(SegmentCache, FirstSegmentIdsAreNotReusedElsewhere) {
  const auto tok = load("llama2");  // Metaspace: a "▁" is prepended to the text's first piece only
  const std::string body = "Hello world, this segment is longer than thirty-two bytes.";
  const std::string later = "</s>" + body;
  const std::vector<int32_t> want_first = cold(*tok, body), want_later = cold(*tok, later);
  tok->encode(body);
  EXPECT_EQ(tok->encode(later), want_later);
  tok->clear_cache();
  tok->encode(later);
  EXPECT_EQ(tok->encode(body), want_first);
}

TEST(SegmentCache, KeepsWithinItsBudgetLeastRecentlyUsedFirst) {
  const std::string a(100, 'a'), b(100, 'b'), c(100, 'c');
  const std::vector<int32_t> ids(10, 7);
  // Three entries do not fit (each ~2 x 100 + 40 + sizeof(Entry) bytes), two do.
  SegmentCache cache(2 * (200 + 40 + 200), 32);
  cache.insert(a, false, ids);
  cache.insert(b, false, ids);
  std::vector<int32_t> out;
  EXPECT_TRUE(cache.lookup(a, false, out));  // a is now the most recent
  cache.insert(c, false, ids);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_FALSE(cache.lookup(b, false, out));
  EXPECT_TRUE(cache.lookup(a, false, out));
  EXPECT_TRUE(cache.lookup(c, false, out));
  EXPECT_FALSE(cache.lookup(c, true, out)) << "stored for first = false only";
  EXPECT_EQ(out.size(), 30u);
  EXPECT_FALSE(cache.keeps("short")) << "under min_bytes";
}

}  // namespace
}  // namespace vlm

// GrammarMatcher over the real Qwen vocabulary: the trie walk with its caches gives the same
// masks as the naive token-by-token reference in every state of random constrained walks, and
// EOS is allowed exactly in accepting states.
#include <gtest/gtest.h>

#include "engine/structured/constraint_cache.h"
#include "engine/structured/token_vocabulary.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/engine/structured/structured_test_util.h"

namespace vlm::testing {
namespace {

using namespace structured;

std::vector<int32_t> allowed(const std::vector<uint64_t>& mask) {
  std::vector<int32_t> out;
  for (size_t w = 0; w < mask.size(); ++w)
    for (int b = 0; b < 64; ++b)
      if ((mask[w] >> b) & 1) out.push_back(static_cast<int32_t>(w * 64 + b));
  return out;
}

TEST(TokenVocabulary, TrieHoldsEveryTextTokenOnce) {
  auto v = qwen_vocabulary();
  size_t tokens = 0;
  for (const auto& n : v->nodes()) tokens += n.token_end - n.token_begin;
  size_t text = 0;
  for (int32_t t = 0; t < v->size(); ++t) text += v->is_text(t);
  EXPECT_EQ(tokens, text);
  auto tok = Tokenizer::load(std::string(VLM_FIXTURES_DIR) + "/../data/tokenizers/qwen3");
  // Byte-level tokens come back as their bytes: " world" and a newline.
  EXPECT_EQ(v->bytes(tok->encode(" world", false).at(0)), " world");
  EXPECT_EQ(v->bytes(tok->encode("\n", false).at(0)), "\n");
  EXPECT_FALSE(v->is_text(*tok->token_to_id("<|im_end|>")));
}

TEST(GrammarMatcher, TrieMaskEqualsNaiveMaskAlongRandomWalks) {
  auto vocab = qwen_vocabulary();
  const std::vector<ConstraintSpec> specs = {
      {ConstraintSpec::Kind::JsonSchema,
       R"({"type":"object","properties":{"city":{"type":"string","maxLength":6},"n":{"type":"integer"},"ok":{"type":"boolean"}},"required":["city","n"]})",
       {}},
      {ConstraintSpec::Kind::Regex, "(ab|[0-9]{2,4})+-é?", {}},
      {ConstraintSpec::Kind::Choice, "", {"yes", "no", "maybe so"}},
  };
  std::mt19937 rng(11);
  for (const auto& spec : specs) {
    GrammarMatcher m(compile_constraint(spec), vocab);
    uint32_t s = m.initial_state();
    for (int step = 0; step < 6; ++step) {
      const std::vector<uint64_t> fast = m.token_mask(s);
      const std::vector<uint64_t> naive = m.naive_token_mask(s);
      ASSERT_EQ(allowed(fast), allowed(naive)) << spec.text << " step " << step;
      const auto ok = allowed(fast);
      ASSERT_FALSE(ok.empty());
      const bool eos_ok = std::find(ok.begin(), ok.end(), vocab->eos_ids()[0]) != ok.end();
      EXPECT_EQ(eos_ok, m.accepting(s));
      std::vector<int32_t> text;
      for (int32_t t : ok)
        if (vocab->is_text(t)) text.push_back(t);
      if (text.empty()) break;
      s = m.advance_token(s, text[std::uniform_int_distribution<size_t>(0, text.size() - 1)(rng)]);
      ASSERT_NE(s, GrammarMatcher::kDead);
    }
  }
}

TEST(ConstraintCache, SharesOneMatcherPerConstraint) {
  ConstraintCache cache(byte_vocabulary(), 2);
  const ConstraintSpec a{ConstraintSpec::Kind::Regex, "a+", {}}, b{ConstraintSpec::Kind::Regex, "b+", {}},
      c{ConstraintSpec::Kind::Choice, "", {"a+"}};
  auto ma = cache.get(a);
  EXPECT_EQ(cache.get(a), ma);
  EXPECT_NE(cache.get(c), ma);  // same text, another kind
  cache.get(b);                 // capacity 2: a is dropped
  EXPECT_NE(cache.get(a), ma);
  EXPECT_THROW(cache.get({ConstraintSpec::Kind::Regex, "(a", {}}), std::invalid_argument);
}

}  // namespace
}  // namespace vlm::testing

// OutputText: stop strings across token boundaries, held-back text, UTF-8 safety.
#include <gtest/gtest.h>

#include "engine/sampling/output_text.h"
#include "tests/engine/fake_text_decoder.h"

namespace vlm::testing {
namespace {

const FakeTextDecoderFactory kFactory({{1, "Hel"}, {2, "lo"}, {3, " wor"}, {4, "ld"}, {5, "!"}, {6, "\xE2\x82"},
                                       {7, "\xAC"}, {8, "END"}, {9, "E"}, {10, "ND"}});

struct TextRun {
  std::string emitted;             // concatenation of every delta (and finish)
  std::vector<std::string> deltas;
  std::optional<std::string> stop;
  size_t stop_at = 0;              // index of the token that matched
};

TextRun run(std::vector<int32_t> ids, std::vector<std::string> stop, bool include = false) {
  OutputText t(kFactory.make({}, true), std::move(stop), include);
  TextRun r;
  for (size_t i = 0; i < ids.size(); ++i) {
    OutputText::Delta d = t.push(ids[i]);
    r.deltas.push_back(d.text);
    r.emitted += d.text;
    if (d.stop) {
      r.stop = d.stop;
      r.stop_at = i;
      return r;
    }
  }
  r.emitted += t.finish();
  return r;
}

TEST(OutputText, NoStopStringsEmitsEverythingAtOnce) {
  const TextRun r = run({1, 2, 3, 4}, {});
  EXPECT_EQ(r.emitted, "Hello world");
  EXPECT_EQ(r.deltas, (std::vector<std::string>{"Hel", "lo", " wor", "ld"}));
}

TEST(OutputText, StopStringAcrossTokensIsFoundAndLeftOut) {
  const TextRun r = run({1, 2, 3, 4, 5}, {"o wo"});
  ASSERT_TRUE(r.stop);
  EXPECT_EQ(*r.stop, "o wo");
  EXPECT_EQ(r.stop_at, 2u);
  EXPECT_EQ(r.emitted, "Hell");
}

TEST(OutputText, IncludeStopStrInOutput) {
  const TextRun r = run({1, 2, 3, 4, 5}, {"o wo"}, true);
  EXPECT_EQ(r.emitted, "Hello wo");
}

TEST(OutputText, HeldBackTextNeverHasToBeTakenBack) {
  // "E" could start "END": it is held until "ND" completes the match.
  const TextRun r = run({1, 9, 10, 5}, {"END"});
  ASSERT_TRUE(r.stop);
  EXPECT_EQ(r.emitted, "Hel");
  // The last len("END") - 1 = 2 bytes are held back at each token.
  EXPECT_EQ(r.deltas, (std::vector<std::string>{"H", "e", "l"}));
  // No match: the held-back tail comes out at the end.
  const TextRun r2 = run({1, 9}, {"END"});
  EXPECT_FALSE(r2.stop);
  EXPECT_EQ(r2.emitted, "HelE");
}

TEST(OutputText, EarliestOfSeveralStopStringsWins) {
  const TextRun r = run({1, 2, 3, 4}, {"world", "lo w"});
  ASSERT_TRUE(r.stop);
  EXPECT_EQ(*r.stop, "lo w");
  EXPECT_EQ(r.emitted, "Hel");
}

TEST(OutputText, SplitUtf8CharacterIsNeverEmittedHalfway) {
  const TextRun r = run({1, 6, 7, 5}, {"xyz"});
  for (const std::string& d : r.deltas) EXPECT_NE(d, "\xE2\x82");
  EXPECT_EQ(r.emitted, "Hel\xE2\x82\xAC!");
  const TextRun cut = run({1, 6}, {});
  EXPECT_EQ(cut.emitted, "Hel\xEF\xBF\xBD") << "an incomplete tail comes out as U+FFFD";
}

TEST(OutputText, WithoutADecoderThereIsNoText) {
  OutputText t(nullptr, {}, false);
  EXPECT_EQ(t.push(1).text, "");
  EXPECT_EQ(t.finish(), "");
}

}  // namespace
}  // namespace vlm::testing

#include "tests/engine/structured/structured_test_util.h"

#include "model/tokenizer/tokenizer.h"

namespace vlm::testing {

using structured::GrammarMatcher;

std::shared_ptr<const structured::TokenVocabulary> byte_vocabulary() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  return std::make_shared<structured::TokenVocabulary>(bytes, std::vector<bool>(256, true), std::vector<int32_t>{});
}

std::shared_ptr<const structured::TokenVocabulary> qwen_vocabulary() {
  static std::shared_ptr<const structured::TokenVocabulary> v = [] {
    auto tok = Tokenizer::load(std::string(VLM_FIXTURES_DIR) + "/../data/tokenizers/qwen3");
    std::vector<int32_t> eos{*tok->token_to_id("<|im_end|>"), *tok->token_to_id("<|endoftext|>")};
    return structured::vocabulary_of(*tok, eos);
  }();
  return v;
}

bool grammar_matches(const structured::Grammar& g, const std::string& text) {
  GrammarMatcher m(g, byte_vocabulary());
  const uint32_t s = m.advance_bytes(m.initial_state(), text);
  return s != GrammarMatcher::kDead && m.accepting(s);
}

std::string random_member(GrammarMatcher& m, std::mt19937& rng, double stop_p, size_t max_bytes, bool& ok) {
  std::string out;
  uint32_t s = m.initial_state();
  ok = false;
  for (size_t step = 0; step < 100000; ++step) {
    if (m.accepting(s) && (!m.can_continue(s) || out.size() >= max_bytes || std::uniform_real_distribution<>(0, 1)(rng) < stop_p)) {
      ok = true;
      return out;
    }
    std::vector<std::pair<uint8_t, uint32_t>> next;
    for (int b = 0; b < 256; ++b) {
      const uint32_t t = m.advance(s, static_cast<uint8_t>(b));
      if (t != GrammarMatcher::kDead) next.push_back({static_cast<uint8_t>(b), t});
    }
    if (next.empty()) return out;
    // Past max_bytes prefer bytes that close things (quotes, brackets) so the walk ends.
    size_t pick = std::uniform_int_distribution<size_t>(0, next.size() - 1)(rng);
    // A quote first: inside a string it closes it ('}' and ']' there would be content).
    if (out.size() >= max_bytes)
      for (char closer : {'}', ']', '"'})
        for (size_t i = 0; i < next.size(); ++i)
          if (next[i].first == static_cast<uint8_t>(closer)) pick = i;
    out.push_back(static_cast<char>(next[pick].first));
    s = next[pick].second;
  }
  return out;
}

}  // namespace vlm::testing

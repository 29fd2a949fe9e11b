// Helpers of the structured-output tests: byte-level matching of a grammar, random walks that
// generate strings of its language, and the real Qwen vocabulary.
#pragma once

#include <memory>
#include <random>
#include <string>

#include "engine/structured/grammar_matcher.h"

namespace vlm::testing {

// A vocabulary of the 256 single bytes (token b is byte b), no EOS.
std::shared_ptr<const structured::TokenVocabulary> byte_vocabulary();
// The qwen3 tokenizer's vocabulary (tests/data/tokenizers/qwen3), EOS = <|im_end|>, <|endoftext|>.
std::shared_ptr<const structured::TokenVocabulary> qwen_vocabulary();

// Whether the grammar matches `text` as a whole.
bool grammar_matches(const structured::Grammar& g, const std::string& text);

// A string of the grammar's language: random allowed bytes, stopping (with probability
// stop_p at each accepting state, always after max_bytes when possible) where it accepts.
// Returns "" with ok=false when the walk gets stuck.
std::string random_member(structured::GrammarMatcher& m, std::mt19937& rng, double stop_p, size_t max_bytes, bool& ok);

}  // namespace vlm::testing

// Constraints of a request (OpenAI response_format, vLLM structured_outputs, tool calls) and
// their compiled matchers, cached per constraint: requests with the same schema share one
// GrammarMatcher, so its transitions and token masks are computed once.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/structured/grammar_matcher.h"

namespace vlm::structured {

struct ConstraintSpec {
  enum class Kind { JsonObject, JsonSchema, Regex, Choice, Grammar };
  Kind kind = Kind::JsonObject;
  std::string text;                  // JsonSchema: the schema's JSON; Regex; Grammar (EBNF)
  std::vector<std::string> choices;  // Choice
  std::string key() const;           // identifies the constraint in the cache
};

// Compiles a spec. Throws SchemaError (JSON Schema) or std::invalid_argument (regex, grammar,
// an empty choice list) naming the problem.
Grammar compile_constraint(const ConstraintSpec& spec);

class ConstraintCache {
 public:
  // capacity: constraints kept; max_states: a matcher with more interned states is not handed
  // to new requests (a fresh one is compiled), so memory stays bounded.
  explicit ConstraintCache(std::shared_ptr<const TokenVocabulary> vocab, size_t capacity = 64,
                           size_t max_states = 200000);
  // The matcher of `spec`, compiled on first use. Throws as compile_constraint.
  std::shared_ptr<GrammarMatcher> get(const ConstraintSpec& spec);
  const TokenVocabulary& vocabulary() const { return *vocab_; }

 private:
  std::shared_ptr<const TokenVocabulary> vocab_;
  size_t capacity_, max_states_;
  std::mutex mu_;
  std::list<std::string> order_;  // most recently used first
  std::unordered_map<std::string, std::pair<std::shared_ptr<GrammarMatcher>, std::list<std::string>::iterator>> map_;
};

}  // namespace vlm::structured

#include "engine/structured/constraint_cache.h"

#include <stdexcept>

#include "engine/structured/ebnf_compiler.h"
#include "engine/structured/json_schema_compiler.h"
#include "engine/structured/regex_compiler.h"

namespace vlm::structured {

std::string ConstraintSpec::key() const {
  std::string k = std::to_string(static_cast<int>(kind)) + ":" + text;
  for (const auto& c : choices) k += std::to_string(c.size()) + ":" + c;
  return k;
}

Grammar compile_constraint(const ConstraintSpec& spec) {
  switch (spec.kind) {
    case ConstraintSpec::Kind::JsonObject:
      return json_object_grammar();
    case ConstraintSpec::Kind::JsonSchema: {
      nlohmann::ordered_json schema;
      try {
        schema = nlohmann::ordered_json::parse(spec.text);
      } catch (const nlohmann::ordered_json::exception&) {
        throw SchemaError("the JSON schema is not valid JSON");
      }
      return compile_json_schema(schema);
    }
    case ConstraintSpec::Kind::Regex: {
      GrammarBuilder b;
      const uint32_t r = compile_regex(b, spec.text);
      return b.build(r);
    }
    case ConstraintSpec::Kind::Choice: {
      if (spec.choices.empty()) throw std::invalid_argument("choice: the list is empty");
      GrammarBuilder b;
      const uint32_t r = b.choice(spec.choices, "choice");
      return b.build(r);
    }
    case ConstraintSpec::Kind::Grammar:
      return compile_ebnf(spec.text);
  }
  throw std::invalid_argument("unknown constraint kind");
}

ConstraintCache::ConstraintCache(std::shared_ptr<const TokenVocabulary> vocab, size_t capacity, size_t max_states)
    : vocab_(std::move(vocab)), capacity_(capacity), max_states_(max_states) {}

std::shared_ptr<GrammarMatcher> ConstraintCache::get(const ConstraintSpec& spec) {
  const std::string key = spec.key();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end() && it->second.first->num_states() <= max_states_) {
      order_.splice(order_.begin(), order_, it->second.second);
      return it->second.first;
    }
  }
  // Compiled outside the lock (a large schema must not hold up other requests).
  auto matcher = std::make_shared<GrammarMatcher>(compile_constraint(spec), vocab_);
  matcher->initial_state();
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = map_.find(key); it != map_.end()) {
    order_.erase(it->second.second);
    map_.erase(it);
  }
  order_.push_front(key);
  map_[key] = {matcher, order_.begin()};
  while (map_.size() > capacity_) {
    map_.erase(order_.back());
    order_.pop_back();
  }
  return matcher;
}

}  // namespace vlm::structured

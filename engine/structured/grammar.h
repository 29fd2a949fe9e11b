// Grammar: a context-free grammar over bytes, the one form every constraint compiles to (regex,
// EBNF, JSON Schema, choice, json_object). Terminals are byte sets (a UTF-8 character is a
// sequence of them); rules are lists of alternatives, each a sequence of terminals and rule
// references. The grammar is flattened for the matcher (engine/structured/grammar_matcher.h):
// every alternative is a run of elements in `elements` closed by an End element, so a position
// in the grammar is one index.
//
// GrammarBuilder::build refuses left recursion (a rule reaching itself without consuming a byte,
// also through nullable prefixes): the matcher expands rules eagerly and would not terminate.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vlm::structured {

// A set of bytes (256 bits).
struct ByteSet {
  std::array<uint64_t, 4> bits{};
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  void remove(uint8_t b) { bits[b >> 6] &= ~(uint64_t{1} << (b & 63)); }
  bool empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
  bool operator==(const ByteSet&) const = default;
  static ByteSet of(uint8_t b) {
    ByteSet s;
    s.add(b);
    return s;
  }
};

struct GrammarElement {
  enum Kind : uint8_t { Bytes, Rule, End };
  Kind kind = End;
  uint32_t arg = 0;  // Bytes: index into Grammar::byte_sets; Rule: rule id; End: unused
};

struct Grammar {
  std::vector<GrammarElement> elements;          // every alternative, each closed by End
  std::vector<std::vector<uint32_t>> rule_alts;  // rule id -> first element of each alternative
  std::vector<ByteSet> byte_sets;
  std::vector<std::string> rule_names;
  uint32_t root = 0;
  size_t num_rules() const { return rule_alts.size(); }
};

// A symbol of an alternative while building: a byte set or a rule reference.
struct Symbol {
  bool is_rule = false;
  uint32_t rule = 0;
  ByteSet bytes;
  static Symbol ref(uint32_t r) { return {true, r, {}}; }
  static Symbol set(ByteSet s) { return {false, 0, s}; }
};
using SymbolSeq = std::vector<Symbol>;

class GrammarBuilder {
 public:
  // Declares a rule (alternatives are added later); names need not be unique (they label errors).
  uint32_t declare(std::string name);
  void add_alternative(uint32_t rule, SymbolSeq seq);
  bool has_alternatives(uint32_t rule) const { return !alts_[rule].empty(); }
  size_t num_rules() const { return alts_.size(); }

  // Helpers, each returning a new rule.
  uint32_t rule_of(std::string name, std::vector<SymbolSeq> alternatives);
  static SymbolSeq literal(std::string_view bytes);  // one symbol per byte
  // x{min,max}; max < 0: unbounded. x* is right-recursive (S -> x S | empty).
  uint32_t repeat(const SymbolSeq& x, int64_t min, int64_t max, const std::string& name);
  // alternatives of literal strings (choice, enum).
  uint32_t choice(const std::vector<std::string>& strings, const std::string& name);

  // Flattens with `root` as the start rule. Throws std::invalid_argument naming the rule for a
  // rule without alternatives, left recursion, or a grammar over max_elements elements.
  Grammar build(uint32_t root, size_t max_elements = 1u << 22) const;

 private:
  std::vector<std::string> names_;
  std::vector<std::vector<SymbolSeq>> alts_;
};

}  // namespace vlm::structured

// GrammarMatcher: runs a Grammar over bytes and masks a vocabulary. One matcher serves every
// request with the same constraint (cached per constraint, engine/structured/constraint_cache.h);
// a sequence keeps only a state id (MatchState).
//
// A parse position is a stack of grammar positions (the element to match next on top, the
// continuation of each enclosing rule below), interned as a tree of nodes (position, parent).
// A state is the set of stacks whose top is a byte set, after expanding rules and popping
// finished alternatives, plus whether the empty stack (the whole grammar matched) is among them.
// States are interned too, so a state id names one set.
//
// Optimized pieces, each beside its naive reference:
//  - advance(state, byte): transitions cached per (state, byte); reference: step_stacks on the
//    raw stack sets;
//  - token_mask(state): one preorder walk of the vocabulary trie, skipping the subtree below a
//    dead prefix, and the finished mask cached per state; reference: naive_token_mask walks each
//    token's bytes on its own with step_stacks.
// Thread safety: the public methods lock; one sampler thread in practice.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/structured/grammar.h"
#include "engine/structured/token_vocabulary.h"

namespace vlm::structured {

class GrammarMatcher {
 public:
  static constexpr uint32_t kDead = UINT32_MAX;

  GrammarMatcher(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocab);

  uint32_t initial_state();
  // The state after `byte`, or kDead when the grammar cannot take it.
  uint32_t advance(uint32_t state, uint8_t byte);
  // The state after a token's bytes (EOS: the same state if accepting), or kDead.
  uint32_t advance_token(uint32_t state, int32_t token);
  uint32_t advance_bytes(uint32_t state, std::string_view bytes);
  bool accepting(uint32_t state);
  // True when some byte can still follow (false: only EOS is left).
  bool can_continue(uint32_t state);

  // The allowed tokens in `state`: bit t of word t / 64. EOS tokens are set iff accepting.
  const std::vector<uint64_t>& token_mask(uint32_t state);
  // The same, computed token by token without the trie or any cache (the reference).
  std::vector<uint64_t> naive_token_mask(uint32_t state);

  const TokenVocabulary& vocabulary() const { return *vocab_; }
  size_t num_states();  // interned so far (tests, memory limits)

 private:
  struct StackNode {
    uint32_t pos = 0;     // element index; unused for the root (empty stack, id 0)
    uint32_t parent = 0;
  };
  struct State {
    std::vector<uint32_t> stacks;  // sorted node ids, each with a Bytes element on top
    bool accepting = false;
    std::vector<uint32_t> next;    // [256] transitions, filled lazily (kUnknown: not computed)
  };
  static constexpr uint32_t kUnknown = UINT32_MAX - 1;

  uint32_t node(uint32_t pos, uint32_t parent);
  // Expands `stack` until a byte set is on top; adds those stacks to `out` (and sets
  // `accepting` for the empty stack).
  void close(uint32_t stack, std::vector<uint32_t>& out, bool& accepting, std::vector<uint32_t>& seen);
  // The stacks after one byte, unsorted, and whether the empty stack is among them.
  void step_stacks(const std::vector<uint32_t>& stacks, uint8_t byte, std::vector<uint32_t>& out, bool& accepting);
  uint32_t intern(std::vector<uint32_t> stacks, bool accepting);
  uint32_t advance_locked(uint32_t state, uint8_t byte);
  void add_eos(std::vector<uint64_t>& mask, bool accepting) const;

  Grammar g_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  std::mutex mu_;
  std::vector<StackNode> nodes_;
  std::unordered_map<uint64_t, uint32_t> node_ids_;
  std::vector<State> states_;
  std::unordered_map<std::string, uint32_t> state_ids_;  // key: stacks' bytes + accepting
  std::unordered_map<uint32_t, std::vector<uint64_t>> masks_;
  std::vector<uint32_t> walk_;  // trie walk: state per depth
  uint32_t initial_ = kDead;
};

// A sequence's place in its constraint.
struct MatchState {
  std::shared_ptr<GrammarMatcher> matcher;
  uint32_t state = 0;
};

}  // namespace vlm::structured

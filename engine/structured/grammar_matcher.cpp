#include "engine/structured/grammar_matcher.h"

#include <algorithm>
#include <cstring>

#include "kernels/core/check.h"

namespace vlm::structured {

GrammarMatcher::GrammarMatcher(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocab)
    : g_(std::move(grammar)), vocab_(std::move(vocab)) {
  nodes_.push_back({0, 0});  // the empty stack
}

uint32_t GrammarMatcher::node(uint32_t pos, uint32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(pos) << 32) | parent;
  auto [it, fresh] = node_ids_.try_emplace(key, static_cast<uint32_t>(nodes_.size()));
  if (fresh) nodes_.push_back({pos, parent});
  return it->second;
}

void GrammarMatcher::close(uint32_t stack, std::vector<uint32_t>& out, bool& accepting, std::vector<uint32_t>& seen) {
  // Depth-first over the expansions; `seen` keeps one visit per stack node within one step.
  std::vector<uint32_t> todo{stack};
  while (!todo.empty()) {
    const uint32_t s = todo.back();
    todo.pop_back();
    if (std::find(seen.begin(), seen.end(), s) != seen.end()) continue;
    seen.push_back(s);
    if (s == 0) {
      accepting = true;
      continue;
    }
    const StackNode n = nodes_[s];
    const GrammarElement e = g_.elements[n.pos];
    if (e.kind == GrammarElement::Bytes) {
      out.push_back(s);
    } else if (e.kind == GrammarElement::End) {
      todo.push_back(n.parent);
    } else {
      const uint32_t cont = node(n.pos + 1, n.parent);
      for (uint32_t alt : g_.rule_alts[e.arg]) todo.push_back(node(alt, cont));
    }
  }
}

void GrammarMatcher::step_stacks(const std::vector<uint32_t>& stacks, uint8_t byte, std::vector<uint32_t>& out,
                                 bool& accepting) {
  std::vector<uint32_t> seen;
  for (uint32_t s : stacks) {
    const StackNode n = nodes_[s];
    if (!g_.byte_sets[g_.elements[n.pos].arg].has(byte)) continue;
    close(node(n.pos + 1, n.parent), out, accepting, seen);
  }
}

uint32_t GrammarMatcher::intern(std::vector<uint32_t> stacks, bool accepting) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  if (stacks.empty() && !accepting) return kDead;
  std::string key(stacks.size() * 4 + 1, '\0');
  if (!stacks.empty()) std::memcpy(key.data(), stacks.data(), stacks.size() * 4);  // data() may be null
  key.back() = accepting ? 1 : 0;
  auto [it, fresh] = state_ids_.try_emplace(std::move(key), static_cast<uint32_t>(states_.size()));
  if (fresh) states_.push_back({std::move(stacks), accepting, std::vector<uint32_t>(256, kUnknown)});
  return it->second;
}

uint32_t GrammarMatcher::initial_state() {
  std::lock_guard<std::mutex> lock(mu_);
  if (initial_ == kDead) {
    std::vector<uint32_t> out, seen;
    bool acc = false;
    for (uint32_t alt : g_.rule_alts[g_.root]) close(node(alt, 0), out, acc, seen);
    initial_ = intern(std::move(out), acc);
    VLM_CHECK(initial_ != kDead, "a grammar with no start");
  }
  return initial_;
}

uint32_t GrammarMatcher::advance_locked(uint32_t state, uint8_t byte) {
  uint32_t& cached = states_[state].next[byte];
  if (cached != kUnknown) return cached;
  std::vector<uint32_t> out;
  bool acc = false;
  step_stacks(states_[state].stacks, byte, out, acc);
  const uint32_t next = intern(std::move(out), acc);
  states_[state].next[byte] = next;  // states_ may have grown: index again
  return next;
}

uint32_t GrammarMatcher::advance(uint32_t state, uint8_t byte) {
  std::lock_guard<std::mutex> lock(mu_);
  return advance_locked(state, byte);
}

uint32_t GrammarMatcher::advance_bytes(uint32_t state, std::string_view bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  for (unsigned char c : bytes) {
    state = advance_locked(state, c);
    if (state == kDead) break;
  }
  return state;
}

uint32_t GrammarMatcher::advance_token(uint32_t state, int32_t token) {
  for (int32_t e : vocab_->eos_ids())
    if (e == token) return accepting(state) ? state : kDead;
  if (token < 0 || token >= vocab_->size() || !vocab_->is_text(token)) return kDead;
  return advance_bytes(state, vocab_->bytes(token));
}

bool GrammarMatcher::accepting(uint32_t state) {
  std::lock_guard<std::mutex> lock(mu_);
  return states_[state].accepting;
}

bool GrammarMatcher::can_continue(uint32_t state) {
  std::lock_guard<std::mutex> lock(mu_);
  return !states_[state].stacks.empty();
}

size_t GrammarMatcher::num_states() {
  std::lock_guard<std::mutex> lock(mu_);
  return states_.size();
}

void GrammarMatcher::add_eos(std::vector<uint64_t>& mask, bool accepting) const {
  for (int32_t e : vocab_->eos_ids()) {
    if (e < 0 || e >= vocab_->size()) continue;
    const uint64_t bit = uint64_t{1} << (e & 63);
    if (accepting) mask[static_cast<size_t>(e) >> 6] |= bit;
    else mask[static_cast<size_t>(e) >> 6] &= ~bit;
  }
}

const std::vector<uint64_t>& GrammarMatcher::token_mask(uint32_t state) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = masks_.find(state); it != masks_.end()) return it->second;
  if (masks_.size() >= 4096) masks_.clear();  // bounded memory: recompute rather than grow
  std::vector<uint64_t> mask(vocab_->mask_words(), 0);
  const auto& nodes = vocab_->nodes();
  const auto& toks = vocab_->node_tokens();
  walk_.assign(1, state);
  for (size_t i = 0; i < nodes.size();) {
    const auto& n = nodes[i];
    walk_.resize(n.depth);  // walk_[d]: the state after the first d bytes
    const uint32_t next = advance_locked(walk_.back(), n.byte);
    if (next == kDead) {
      i = n.end;  // no token below this prefix can match
      continue;
    }
    for (uint32_t k = n.token_begin; k < n.token_end; ++k)
      mask[static_cast<size_t>(toks[k]) >> 6] |= uint64_t{1} << (toks[k] & 63);
    walk_.push_back(next);
    ++i;
  }
  add_eos(mask, states_[state].accepting);
  return masks_.emplace(state, std::move(mask)).first->second;
}

std::vector<uint64_t> GrammarMatcher::naive_token_mask(uint32_t state) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint64_t> mask(vocab_->mask_words(), 0);
  const std::vector<uint32_t> start = states_[state].stacks;
  for (int32_t t = 0; t < vocab_->size(); ++t) {
    if (!vocab_->is_text(t)) continue;
    std::vector<uint32_t> cur = start;
    bool alive = true;
    for (unsigned char c : vocab_->bytes(t)) {
      if (cur.empty()) {  // only the empty stack is left: no byte can follow
        alive = false;
        break;
      }
      std::vector<uint32_t> out;
      bool acc = false;
      step_stacks(cur, c, out, acc);
      std::sort(out.begin(), out.end());
      out.erase(std::unique(out.begin(), out.end()), out.end());
      cur = std::move(out);
      alive = !cur.empty() || acc;
      if (!alive) break;
    }
    if (alive) mask[static_cast<size_t>(t) >> 6] |= uint64_t{1} << (t & 63);
  }
  add_eos(mask, states_[state].accepting);
  return mask;
}

}  // namespace vlm::structured

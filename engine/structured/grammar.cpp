#include "engine/structured/grammar.h"

#include <stdexcept>

namespace vlm::structured {

uint32_t GrammarBuilder::declare(std::string name) {
  names_.push_back(std::move(name));
  alts_.emplace_back();
  return static_cast<uint32_t>(alts_.size() - 1);
}

void GrammarBuilder::add_alternative(uint32_t rule, SymbolSeq seq) { alts_.at(rule).push_back(std::move(seq)); }

uint32_t GrammarBuilder::rule_of(std::string name, std::vector<SymbolSeq> alternatives) {
  const uint32_t r = declare(std::move(name));
  for (auto& a : alternatives) add_alternative(r, std::move(a));
  return r;
}

SymbolSeq GrammarBuilder::literal(std::string_view bytes) {
  SymbolSeq s;
  for (unsigned char c : bytes) s.push_back(Symbol::set(ByteSet::of(c)));
  return s;
}

uint32_t GrammarBuilder::repeat(const SymbolSeq& x, int64_t min, int64_t max, const std::string& name) {
  if (min < 0 || (max >= 0 && max < min)) throw std::invalid_argument("bad repetition bounds in " + name);
  if (min > 100000 || max > 100000) throw std::invalid_argument("repetition count over 100000 in " + name);
  // tail: what follows the min mandatory copies.
  uint32_t tail;
  if (max < 0) {
    tail = declare(name + "*");
    SymbolSeq loop = x;
    loop.push_back(Symbol::ref(tail));
    add_alternative(tail, loop);
    add_alternative(tail, {});
  } else {
    // up to (max - min) optional copies, nested: t_k -> empty | x t_{k-1}.
    tail = declare(name + "?");
    add_alternative(tail, {});
    for (int64_t k = 1; k <= max - min; ++k) {
      const uint32_t t = declare(name + "?");
      add_alternative(t, {});
      SymbolSeq s = x;
      s.push_back(Symbol::ref(tail));
      add_alternative(t, s);
      tail = t;
    }
  }
  SymbolSeq all;
  for (int64_t k = 0; k < min; ++k) all.insert(all.end(), x.begin(), x.end());
  all.push_back(Symbol::ref(tail));
  return rule_of(name, {all});
}

uint32_t GrammarBuilder::choice(const std::vector<std::string>& strings, const std::string& name) {
  const uint32_t r = declare(name);
  for (const auto& s : strings) add_alternative(r, literal(s));
  return r;
}

Grammar GrammarBuilder::build(uint32_t root, size_t max_elements) const {
  const size_t n = alts_.size();
  for (size_t r = 0; r < n; ++r)
    if (alts_[r].empty()) throw std::invalid_argument("rule '" + names_[r] + "' has no alternatives");
  // Nullable rules (fixed point), then left recursion: an edge r -> s when s appears in an
  // alternative of r after only nullable symbols; a cycle is left recursion.
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const auto& a : alts_[r]) {
        bool all = true;
        for (const auto& s : a) all = all && s.is_rule && nullable[s.rule];
        if (all) {
          nullable[r] = true;
          changed = true;
          break;
        }
      }
    }
  }
  std::vector<std::vector<uint32_t>> left(n);
  for (size_t r = 0; r < n; ++r)
    for (const auto& a : alts_[r])
      for (const auto& s : a) {
        if (!s.is_rule) break;
        left[r].push_back(s.rule);
        if (!nullable[s.rule]) break;
      }
  std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<uint32_t, size_t>> stack;
  for (uint32_t start = 0; start < n; ++start) {
    if (color[start]) continue;
    stack.push_back({start, 0});
    color[start] = 1;
    while (!stack.empty()) {
      auto& [r, i] = stack.back();
      if (i == left[r].size()) {
        color[r] = 2;
        stack.pop_back();
        continue;
      }
      const uint32_t s = left[r][i++];
      if (color[s] == 1) throw std::invalid_argument("the grammar is left-recursive at rule '" + names_[s] + "'");
      if (color[s] == 0) {
        color[s] = 1;
        stack.push_back({s, 0});
      }
    }
  }
  Grammar g;
  g.root = root;
  g.rule_names = names_;
  g.rule_alts.resize(n);
  for (size_t r = 0; r < n; ++r) {
    for (const auto& a : alts_[r]) {
      g.rule_alts[r].push_back(static_cast<uint32_t>(g.elements.size()));
      for (const auto& s : a) {
        if (s.is_rule) {
          g.elements.push_back({GrammarElement::Rule, s.rule});
          continue;
        }
        uint32_t id = 0;
        while (id < g.byte_sets.size() && !(g.byte_sets[id] == s.bytes)) ++id;
        if (id == g.byte_sets.size()) g.byte_sets.push_back(s.bytes);
        g.elements.push_back({GrammarElement::Bytes, id});
      }
      g.elements.push_back({GrammarElement::End, 0});
      if (g.elements.size() > max_elements) throw std::invalid_argument("the grammar is too large");
    }
  }
  return g;
}

}  // namespace vlm::structured

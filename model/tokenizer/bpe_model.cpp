#include "model/tokenizer/bpe_model.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "model/tokenizer/utf8.h"

namespace vlm {

using nlohmann::json;

// Merge ranks by token-id pair, open addressing. A pair listed twice keeps its later rank (as a
// hash map built from the list in order would).
struct BpeModel::MergeTable {
  struct Entry {
    uint64_t key = kEmpty;
    int32_t rank = 0;
    int32_t new_id = 0;
  };
  static constexpr uint64_t kEmpty = ~0ull;
  std::vector<Entry> slots;
  uint64_t mask = 0;

  explicit MergeTable(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    slots.resize(cap);
    mask = cap - 1;
  }
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  static uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
  }
  void insert(uint64_t k, int32_t rank, int32_t new_id) {
    for (uint64_t i = mix(k) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == kEmpty || slots[i].key == k) {
        slots[i] = {k, rank, new_id};
        return;
      }
    }
  }
  const Entry* find(int32_t a, int32_t b) const {
    const uint64_t k = key(a, b);
    for (uint64_t i = mix(k) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == k) return &slots[i];
      if (slots[i].key == kEmpty) return nullptr;
    }
  }
};

// Token string -> id: open addressing over (hash, id) slots, the strings themselves in
// id_to_token_ (flat and cache-friendly; the vocabulary is looked up for every character of a
// word not in the cache, and three times per merge at load).
struct BpeModel::VocabIndex {
  struct Slot {
    uint32_t hash = 0;
    int32_t id = -1;
  };
  std::vector<Slot> slots;
  uint64_t mask = 0;
  const std::vector<std::string>& names;

  VocabIndex(size_t n, const std::vector<std::string>& names_) : names(names_) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    slots.resize(cap);
    mask = cap - 1;
  }
  static uint64_t hash(std::string_view s) { return std::hash<std::string_view>{}(s); }
  // Inserts id (whose string is names[id]); false when the string is already present.
  bool insert(int32_t id) {
    const uint64_t h = hash(names[id]);
    for (uint64_t i = h & mask;; i = (i + 1) & mask) {
      if (slots[i].id < 0) {
        slots[i] = {static_cast<uint32_t>(h >> 32), id};
        return true;
      }
      if (slots[i].hash == static_cast<uint32_t>(h >> 32) && names[slots[i].id] == names[id]) return false;
    }
  }
  int32_t find(std::string_view s) const {
    const uint64_t h = hash(s);
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (uint64_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& slot = slots[i];
      if (slot.id < 0) return -1;
      if (slot.hash == tag && names[slot.id] == s) return slot.id;
    }
  }
};

BpeModel::BpeModel() = default;
BpeModel::~BpeModel() = default;

namespace {

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw LoadError(source + ": model: " + what);
}

std::optional<std::string> optional_string(const json& j, const char* key, const std::string& source) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) fail(source, std::string("'") + key + "' must be a string or null");
  return it->get<std::string>();
}

}  // namespace

std::unique_ptr<BpeModel> BpeModel::from_json(const json& j, const std::string& source) {
  if (!j.is_object()) fail(source, "missing 'model' object");
  const std::string type = j.value("type", std::string("BPE"));
  if (type != "BPE")
    throw LoadError(source + ": model type '" + type + "' is not supported (supported: BPE)");
  if (auto it = j.find("dropout"); it != j.end() && !it->is_null() && !(it->is_number() && it->get<double>() == 0.0))
    fail(source, "BPE dropout is not supported (encoding must be deterministic)");

  std::unique_ptr<BpeModel> m(new BpeModel());
  auto vocab = j.find("vocab");
  if (vocab == j.end() || !vocab->is_object()) fail(source, "missing 'vocab' object");
  int64_t max_id = -1;
  for (const auto& [token, id] : vocab->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      fail(source, "vocab entry '" + token + "' has an invalid id " + id.dump());
    max_id = std::max<int64_t>(max_id, id.get<int64_t>());
  }
  m->id_to_token_.resize(static_cast<size_t>(max_id + 1));
  m->id_known_.assign(static_cast<size_t>(max_id + 1), false);
  m->vocab_ = std::make_unique<VocabIndex>(vocab->size(), m->id_to_token_);
  for (const auto& [token, id] : vocab->items()) {
    const auto v = id.get<int32_t>();
    if (m->id_known_[v]) fail(source, "vocab id " + std::to_string(v) + " is given to two tokens");
    m->id_to_token_[v] = token;
    m->id_known_[v] = true;
    m->vocab_->insert(v);
  }

  m->continuing_subword_prefix_ = optional_string(j, "continuing_subword_prefix", source);
  m->end_of_word_suffix_ = optional_string(j, "end_of_word_suffix", source);
  m->fuse_unk_ = j.value("fuse_unk", false);
  m->byte_fallback_ = j.value("byte_fallback", false);
  m->ignore_merges_ = j.value("ignore_merges", false);
  if (auto unk = optional_string(j, "unk_token", source)) {
    const int32_t id = m->vocab_->find(*unk);
    if (id < 0) fail(source, "unk_token '" + *unk + "' is not in the vocabulary");
    m->unk_id_ = id;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    m->byte_ids_[b] = m->vocab_->find(name);
  }

  auto merges = j.find("merges");
  if (merges == j.end() || !merges->is_array()) fail(source, "missing 'merges' array");
  m->merges_ = std::make_unique<MergeTable>(merges->size());
  const size_t prefix_len = m->continuing_subword_prefix_ ? m->continuing_subword_prefix_->size() : 0;
  int32_t rank = 0;
  for (const auto& merge : *merges) {
    std::string a, b;
    if (merge.is_string()) {  // "a b"
      const std::string& s = merge.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos) fail(source, "merge '" + s + "' is not of the form 'a b'");
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      a = merge[0].get<std::string>();
      b = merge[1].get<std::string>();
    } else {
      fail(source, "merge " + merge.dump() + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    const int32_t ia = m->vocab_->find(a), ib = m->vocab_->find(b);
    if (ia < 0) fail(source, "merge part '" + a + "' is not in the vocabulary");
    if (ib < 0) fail(source, "merge part '" + b + "' is not in the vocabulary");
    if (b.size() < prefix_len) fail(source, "merge part '" + b + "' lacks the continuing_subword_prefix");
    const std::string merged = a + b.substr(prefix_len);
    const int32_t im = m->vocab_->find(merged);
    if (im < 0) fail(source, "merge result '" + merged + "' is not in the vocabulary");
    m->merges_->insert(MergeTable::key(ia, ib), rank++, im);
  }
  return m;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const int32_t id = vocab_->find(token);
  if (id < 0) return std::nullopt;
  return id;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= num_ids() || !id_known_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::clear_cache() const {
  for (CacheShard& s : cache_) {
    std::lock_guard lock(s.mutex);
    s.words.clear();
  }
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const int32_t id = vocab_->find(word); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  if (word.size() > kMaxCachedBytes) {
    merge_word(word, out);
    return;
  }
  CacheShard& shard = cache_[(StringHash{}(word) >> 8) % kNumShards];
  {
    std::lock_guard lock(shard.mutex);
    if (auto it = shard.words.find(word); it != shard.words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t before = out.size();
  merge_word(word, out);
  std::vector<int32_t> ids(out.begin() + static_cast<ptrdiff_t>(before), out.end());
  std::lock_guard lock(shard.mutex);
  if (shard.words.size() >= kMaxShardEntries) shard.words.clear();
  shard.words.emplace(std::string(word), std::move(ids));
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id, prev, next;
    bool alive;
  };
  struct Candidate {
    int32_t rank, pos, new_id;
  };
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  thread_local std::string affixed;
  symbols.clear();
  heap.clear();
  auto add = [&](int32_t id) {
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1, true});
  };

  // One symbol per character (with the subword prefix / word suffix where configured).
  int32_t pending_unk = -1;  // an unk symbol not yet added (fuse_unk extends it)
  size_t i = 0;
  while (i < word.size()) {
    const size_t start = i;
    i = std::min(word.size(), i + utf8::lead_length(static_cast<uint8_t>(word[i])));
    std::string_view s = word.substr(start, i - start);
    const bool prefix = start > 0 && continuing_subword_prefix_;
    const bool suffix = i == word.size() && end_of_word_suffix_;
    if (prefix || suffix) {
      affixed.clear();
      if (prefix) affixed += *continuing_subword_prefix_;
      affixed += s;
      if (suffix) affixed += *end_of_word_suffix_;
      s = affixed;
    }
    if (const int32_t id = vocab_->find(s); id >= 0) {
      if (pending_unk >= 0) add(pending_unk);
      pending_unk = -1;
      add(id);
      continue;
    }
    if (byte_fallback_ &&
        std::all_of(s.begin(), s.end(), [&](char c) { return byte_ids_[static_cast<uint8_t>(c)] >= 0; })) {
      // (tokenizers leaves a pending unk in place here: it lands after these bytes)
      for (char c : s) add(byte_ids_[static_cast<uint8_t>(c)]);
      continue;
    }
    if (unk_id_) {
      if (pending_unk >= 0 && !fuse_unk_) add(pending_unk);
      pending_unk = *unk_id_;
    }
  }
  if (pending_unk >= 0) add(pending_unk);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  // Lowest rank first; among equal ranks the leftmost.
  auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  const MergeTable& merges = *merges_;
  for (size_t p = 0; p + 1 < symbols.size(); ++p)
    if (const auto* m = merges.find(symbols[p].id, symbols[p + 1].id))
      heap.push_back({m->rank, static_cast<int32_t>(p), m->new_id});
  std::make_heap(heap.begin(), heap.end(), later);
  auto push = [&](int32_t rank, int32_t pos, int32_t new_id) {
    heap.push_back({rank, pos, new_id});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& cur = symbols[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    Symbol& right = symbols[cur.next];
    const auto* m = merges.find(cur.id, right.id);
    if (!m || m->new_id != top.new_id) continue;  // stale candidate
    cur.id = top.new_id;
    right.alive = false;
    cur.next = right.next;
    if (cur.next >= 0) symbols[cur.next].prev = top.pos;
    if (cur.prev >= 0)
      if (const auto* pm = merges.find(symbols[cur.prev].id, cur.id)) push(pm->rank, cur.prev, pm->new_id);
    if (cur.next >= 0)
      if (const auto* nm = merges.find(cur.id, symbols[cur.next].id)) push(nm->rank, top.pos, nm->new_id);
  }
  for (const Symbol& s : symbols)
    if (s.alive) out.push_back(s.id);
}

}  // namespace vlm

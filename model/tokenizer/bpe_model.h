// The BPE model of tokenizer.json ("model": {"type": "BPE", ...}): vocabulary, ranked merges,
// unk_token / fuse_unk, byte_fallback (<0xXX> tokens), ignore_merges, continuing_subword_prefix
// and end_of_word_suffix, with the semantics of Hugging Face tokenizers' BPE (dropout must be
// null or 0: encoding is deterministic).
//
// Merging is the usual linked list of symbols with a min-heap of candidate merges keyed by
// (rank, position): O(n log n) in the word length. Results of words up to kMaxCachedBytes are
// kept in a sharded, mutex-guarded cache, so tokenize() may run on several threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace vlm {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  static constexpr size_t kMaxCachedBytes = 256;

  // Parses the "model" object. Throws LoadError "source: ..." for a model type other than BPE
  // (naming it), a non-null dropout, a malformed vocab or merge, a merge whose parts or result
  // are not in the vocabulary, or an unk_token missing from it.
  static std::unique_ptr<BpeModel> from_json(const nlohmann::json& j, const std::string& source);
  ~BpeModel();

  // Appends the ids of one pre-tokenized word (valid UTF-8). Characters that are neither in the
  // vocabulary nor byte-fallback encodable become unk_token, or are dropped without one.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The vocabulary string of `id`, or nullptr for an id the vocabulary does not hold.
  const std::string* id_to_token(int32_t id) const;
  int64_t num_ids() const { return static_cast<int64_t>(id_to_token_.size()); }  // max id + 1
  void clear_cache() const;

 private:
  BpeModel();
  struct MergeTable;
  struct VocabIndex;
  struct CacheShard {
    std::mutex mutex;
    StringMap<std::vector<int32_t>> words;
  };
  static constexpr size_t kNumShards = 16;
  static constexpr size_t kMaxShardEntries = 8192;

  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  std::unique_ptr<VocabIndex> vocab_;  // token string -> id, over id_to_token_
  std::vector<std::string> id_to_token_;
  std::vector<bool> id_known_;
  std::unique_ptr<MergeTable> merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::optional<std::string> continuing_subword_prefix_;
  std::optional<std::string> end_of_word_suffix_;
  std::array<int32_t, 256> byte_ids_{};  // id of "<0xXX>", -1 when absent
  mutable std::array<CacheShard, kNumShards> cache_;
};

}  // namespace vlm

// A Hugging Face tokenizer (tokenizer.json with a BPE model, plus tokenizer_config.json), exact
// against the `tokenizers` library: encode gives the same ids, decode the same text.
//
// encode(text): added tokens are cut out of the raw text first (never split, never normalized;
// normalized added tokens are cut from each normalized piece), the rest is normalized,
// pre-tokenized into words and each word BPE-encoded (with a cache; whole raw segments, the text
// between added tokens, are cached too: a chat's resent history); with add_special_tokens
// the post-processor then adds BOS/EOS or its template. decode(ids): token strings through the
// decoder chain (see model/tokenizer/components/token_decoder.h). The pipeline's parts: model/tokenizer/tokenizer_json.h.
//
// Thread safety: after load, every const method may be called from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace vlm {

struct TokenizerParts;
class SegmentCache;

class Tokenizer {
 public:
  // Reads DIR/tokenizer.json (+ DIR/tokenizer_config.json when present). Throws LoadError naming
  // the file for an unreadable or malformed file and for an unsupported component type (the
  // message names the type).
  static std::unique_ptr<Tokenizer> load(const std::string& model_dir);
  // The same from JSON text (tests, tools); `config_json` may be empty. Error messages name
  // `source`.
  static std::unique_ptr<Tokenizer> from_json(std::string_view tokenizer_json,
                                              std::string_view config_json = {},
                                              const std::string& source = "tokenizer.json");
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of `text`. Invalid UTF-8 is first replaced (each maximal invalid subsequence by
  // U+FFFD). add_special_tokens runs the post-processor (BOS/EOS); added and special tokens
  // written in the text are matched either way.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // Token ids of a rendered chat prompt, as Hugging Face's processors tokenize it: the
  // post-processor's special tokens (BOS) added, unless the text already begins with the BOS
  // token, which a template wrote ({{ bos_token }}); then nothing is added. Never two BOS from
  // the two sources. (HF's processor(text=...) would add a second BOS there; its
  // apply_chat_template(tokenize=True) does not.)
  std::vector<int32_t> encode_chat(std::string_view prompt) const;
  // Text of `ids` (valid UTF-8). Ids the tokenizer does not know are skipped; with
  // skip_special_tokens, so are special added tokens.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  int64_t vocab_size() const;  // one past the largest id, added tokens included
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;  // raw vocabulary string, "" for an unknown id
  bool is_special(int32_t id) const;
  // The bytes token `id` stands for in generated text (what constrained decoding matches):
  // an added token's content; a byte-level token's bytes (GPT-2 alphabet); a SentencePiece
  // byte token <0xXX> as that byte, and "\u2581" as a space otherwise. "" for an unknown id.
  std::string token_bytes(int32_t id) const;
  const std::string& bos_token() const { return bos_token_; }  // "" if none
  const std::string& eos_token() const { return eos_token_; }  // "" if none
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }

  // Empties the word and segment caches (benchmarks measure cold encoding with it).
  void clear_cache() const;
  // Raw segments (text between added tokens) whose ids encode() keeps (model/tokenizer/segment_cache.h).
  size_t num_cached_segments() const;
  static constexpr size_t kSegmentCacheBytes = 16 << 20;
  static constexpr size_t kMinCachedSegmentBytes = 32;

 private:
  explicit Tokenizer(std::unique_ptr<TokenizerParts> parts);
  std::unique_ptr<TokenizerParts> parts_;
  std::unique_ptr<SegmentCache> segments_;  // thread-safe
  std::string bos_token_, eos_token_;
  std::optional<int32_t> bos_id_, eos_id_;
};

}  // namespace vlm

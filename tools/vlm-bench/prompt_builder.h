// PromptBuilder: random prompts of about N tokens as the *server* counts them. Prompts are random
// words from a pool of common English words. Tokens are counted by, in this order: a local
// Hugging Face tokenizer (vlm-bench --tokenizer DIR, read with model/tokenizer), the server's
// vLLM-style `POST /tokenize` ({"model","prompt"} -> {"tokens":[...],"count"}), or llama.cpp's
// (`{"content": ...}` -> `{"tokens": [...]}`). With a counter the builder measures tokens per word
// once, then tokenizes each prompt and adds or drops words (at most a few rounds) until it has the
// wanted length; token-id prompts (completions only) are cut from the ids of the tokenized pool,
// so their length is exact. Without one it assumes one token per word (these words are single
// tokens in common BPE vocabularies) and the caller says so.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/vlm-bench/simple_http_client.h"

namespace vlm {
class Tokenizer;
}

namespace vlm::bench {

class PromptBuilder {
 public:
  // client may be null (no calibration over HTTP). tokenize_url: e.g.
  // "http://127.0.0.1:8000/tokenize". local (not owned) may be null; when set it counts tokens
  // (encode without special tokens) and the server is not asked.
  PromptBuilder(SimpleHttpClient* client, std::string tokenize_url, std::string model,
                const Tokenizer* local = nullptr);

  // True when a token counter answered.
  bool calibrated() const { return calibrated_; }
  // How tokens were counted: "--tokenizer", "/tokenize", "/tokenize (llama.cpp)" or "" (estimated).
  std::string counter() const;
  double tokens_per_word() const { return tokens_per_word_; }

  // A prompt the server tokenizes to about `num_tokens` tokens (exactly, when the server's
  // count can be hit by whole words).
  std::string text(int num_tokens, std::mt19937_64& rng);
  // Exactly `num_tokens` ids taken from the tokenized word pool. Throws std::runtime_error if the
  // server has no /tokenize.
  std::vector<int64_t> ids(int num_tokens, std::mt19937_64& rng);

 private:
  // The server's token count of `prompt`, or -1 when /tokenize is unavailable.
  int count_tokens(const std::string& prompt, std::vector<int64_t>* ids = nullptr);
  std::string words(int n, std::mt19937_64& rng) const;

  enum class Shape { Unknown, Vllm, LlamaCpp };
  int count_remote(const nlohmann::json& req, std::vector<int64_t>* ids);

  SimpleHttpClient* client_;
  const Tokenizer* local_ = nullptr;
  Shape shape_ = Shape::Unknown;
  std::string tokenize_url_, model_;
  bool calibrated_ = false;
  double tokens_per_word_ = 1.0;
  std::vector<int64_t> id_pool_;
};

}  // namespace vlm::bench

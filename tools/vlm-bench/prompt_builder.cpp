#include "tools/vlm-bench/prompt_builder.h"

#include <nlohmann/json.hpp>

#include "model/tokenizer/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace vlm::bench {
namespace {

const char* const kWords[] = {
    "the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are", "as",
    "with", "his", "they", "at", "be", "this", "have", "from", "or", "one", "had", "by", "word", "but",
    "not", "what", "all", "were", "we", "when", "your", "can", "said", "there", "use", "an", "each",
    "which", "she", "do", "how", "their", "if", "will", "up", "other", "about", "out", "many", "then",
    "them", "these", "so", "some", "her", "would", "make", "like", "him", "into", "time", "has", "look",
    "two", "more", "write", "go", "see", "number", "no", "way", "could", "people", "my", "than",
    "first", "water", "been", "call", "who", "oil", "its", "now", "find", "long", "down", "day", "did",
    "get", "come", "made", "may", "part", "over", "new", "sound", "take", "only", "little", "work",
    "know", "place", "year", "live", "me", "back", "give", "most", "very", "after", "thing", "our",
    "just", "name", "good", "sentence", "man", "think", "say", "great", "where", "help", "through",
    "much", "before", "line", "right", "too", "mean", "old", "any", "same", "tell", "boy", "follow",
    "came", "want", "show", "also", "around", "form", "three", "small", "set", "put", "end", "does",
    "another", "well", "large", "must", "big", "even", "such", "because", "turn", "here", "why", "ask",
    "went", "men", "read", "need", "land", "different", "home", "us", "move", "try", "kind", "hand",
    "picture", "again", "change", "off", "play", "spell", "air", "away", "animal", "house", "point",
    "page", "letter", "mother", "answer", "found", "study", "still", "learn", "should", "world"};
constexpr int kNumWords = sizeof(kWords) / sizeof(kWords[0]);
constexpr int kCalibrationWords = 1000;

}  // namespace

PromptBuilder::PromptBuilder(SimpleHttpClient* client, std::string tokenize_url, std::string model,
                             const Tokenizer* local)
    : client_(client), local_(local), tokenize_url_(std::move(tokenize_url)), model_(std::move(model)) {
  std::mt19937_64 rng(12345);
  const int n = count_tokens(words(kCalibrationWords, rng), &id_pool_);
  if (n > 0) {
    calibrated_ = true;
    tokens_per_word_ = static_cast<double>(n) / kCalibrationWords;
  }
}

std::string PromptBuilder::words(int n, std::mt19937_64& rng) const {
  std::uniform_int_distribution<int> pick(0, kNumWords - 1);
  std::string s;
  for (int i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += kWords[pick(rng)];
  }
  return s;
}

std::string PromptBuilder::counter() const {
  if (!calibrated_) return "";
  if (local_) return "--tokenizer";
  return shape_ == Shape::LlamaCpp ? "/tokenize (llama.cpp)" : "/tokenize";
}

int PromptBuilder::count_remote(const nlohmann::json& req, std::vector<int64_t>* ids) {
  const HttpResult r = client_->post_json(tokenize_url_, req.dump());
  if (r.status != 200) return -1;
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("tokens") || !j["tokens"].is_array()) return -1;
  std::vector<int64_t> got;
  for (const auto& t : j["tokens"]) {
    if (!t.is_number_integer()) return -1;  // llama.cpp's with_pieces form is not asked for
    got.push_back(t.get<int64_t>());
  }
  if (ids) ids->insert(ids->end(), got.begin(), got.end());
  return static_cast<int>(got.size());
}

int PromptBuilder::count_tokens(const std::string& prompt, std::vector<int64_t>* ids) {
  if (local_) {
    const std::vector<int32_t> got = local_->encode(prompt, /*add_special_tokens=*/false);
    if (ids) ids->insert(ids->end(), got.begin(), got.end());
    return static_cast<int>(got.size());
  }
  if (!client_) return -1;
  if (shape_ != Shape::LlamaCpp) {
    const int n = count_remote({{"model", model_}, {"prompt", prompt}, {"add_special_tokens", false}}, ids);
    if (n >= 0 || shape_ == Shape::Vllm) {
      if (n >= 0) shape_ = Shape::Vllm;
      return n;
    }
  }
  const int n = count_remote({{"content", prompt}, {"add_special", false}}, ids);
  if (n >= 0) shape_ = Shape::LlamaCpp;
  return n;
}

std::string PromptBuilder::text(int num_tokens, std::mt19937_64& rng) {
  int n = std::max(1, static_cast<int>(std::lround(num_tokens / tokens_per_word_)));
  std::string best = words(n, rng);
  if (!calibrated_) return best;
  // Grow or shrink by whole words; keep the closest count seen.
  int best_gap = 1 << 30;
  std::string prompt = best;
  for (int round = 0; round < 4; ++round) {
    const int count = count_tokens(prompt);
    if (count < 0) break;
    const int gap = num_tokens - count;
    if (std::abs(gap) < std::abs(best_gap)) {
      best_gap = gap;
      best = prompt;
    }
    if (gap == 0) break;
    int step = static_cast<int>(std::lround(gap / tokens_per_word_));
    if (step == 0) step = gap > 0 ? 1 : -1;
    if (step > 0) {
      prompt += ' ' + words(step, rng);
    } else {
      int drop = -step;
      while (drop-- > 0) {
        const size_t sp = prompt.rfind(' ');
        if (sp == std::string::npos) break;
        prompt.resize(sp);
      }
    }
  }
  return best;
}

std::vector<int64_t> PromptBuilder::ids(int num_tokens, std::mt19937_64& rng) {
  if (id_pool_.empty())
    throw std::runtime_error("--prompt-ids needs --tokenizer DIR or the server's POST /tokenize (" + tokenize_url_ +
                             ") to learn valid token ids; it did not answer");
  std::uniform_int_distribution<size_t> pick(0, id_pool_.size() - 1);
  std::vector<int64_t> out(static_cast<size_t>(num_tokens));
  for (int64_t& id : out) id = id_pool_[pick(rng)];
  return out;
}

}  // namespace vlm::bench

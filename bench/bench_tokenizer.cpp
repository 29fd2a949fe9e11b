// Tokenizer::encode throughput (model/tokenizer/tokenizer.h) on English text, one thread, for the three
// real tokenizers of tests/data/tokenizers (scripts/fetch_test_data.sh): Llama-2 (SentencePiece
// style BPE, no pre-tokenizer: each paragraph is one word), Llama-3 and Qwen3 (byte-level BPE
// with a regex pre-tokenizer and the word cache).
// The text: ~300 KB of synthetic English built from varied sentence patterns over a word list
// (deterministic seed), cut into ~1 KB paragraphs, each encoded as one call (a prompt-sized
// input). cold: the word cache is emptied before every pass over the text; warm: it is not.
// Counters: MB_per_s = input bytes (10^6) per CPU second of the encoding thread; tok_per_s =
// tokens per CPU second.
// Run: build/bin/bench_tokenizer --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"

namespace {

const char* kNouns[] = {
    "time", "year", "people", "way", "day", "man", "woman", "child", "world", "life", "hand", "part",
    "place", "case", "week", "company", "system", "program", "question", "work", "government", "number",
    "night", "point", "home", "water", "room", "mother", "area", "money", "story", "fact", "month", "lot",
    "right", "study", "book", "eye", "job", "word", "business", "issue", "side", "kind", "head", "house",
    "service", "friend", "father", "power", "hour", "game", "line", "end", "member", "law", "car", "city",
    "community", "name", "president", "team", "minute", "idea", "kid", "body", "information", "back",
    "parent", "face", "others", "level", "office", "door", "health", "person", "art", "war", "history",
    "party", "result", "change", "morning", "reason", "research", "girl", "guy", "moment", "air", "teacher",
    "force", "education", "foot", "boy", "age", "policy", "process", "music", "market", "sense", "nation",
    "plan", "college", "interest", "death", "experience", "effect", "class", "control", "care", "field",
    "development", "role", "effort", "rate", "heart", "drug", "show", "leader", "light", "voice", "wife",
    "police", "mind", "price", "report", "decision", "son", "view", "relationship", "town", "road", "arm",
    "difference", "value", "building", "action", "model", "season", "society", "tax", "director", "position",
    "player", "record", "paper", "space", "ground", "form", "event", "official", "matter", "center",
    "couple", "site", "project", "activity", "star", "table", "need", "court", "oil", "situation", "cost",
    "industry", "figure", "street", "image", "phone", "data", "picture", "practice", "piece", "land",
    "product", "doctor", "wall", "patient", "worker", "news", "test", "movie", "north", "love", "support",
    "technology", "step", "baby", "computer", "type", "attention", "film", "tree", "source", "organization",
    "hair", "window", "evidence", "population", "site", "training", "behavior", "river", "energy", "garden",
    "network", "language", "machine", "engine", "scientist", "bridge", "mountain", "island", "theory"};
const char* kVerbs[] = {
    "said", "made", "found", "took", "gave", "told", "became", "left", "felt", "brought", "began", "kept",
    "held", "wrote", "stood", "heard", "let", "meant", "set", "met", "ran", "paid", "sat", "spoke", "lay",
    "led", "read", "grew", "lost", "fell", "sent", "built", "understood", "drew", "broke", "spent", "cut",
    "rose", "drove", "bought", "wore", "chose", "explains", "describes", "suggests", "requires", "improves",
    "changes", "supports", "considers", "includes", "continues", "develops", "reaches", "remains", "offers",
    "appears", "creates", "provides", "follows", "produces", "measures", "compares", "predicts", "reduces",
    "encodes", "decodes", "computes", "returns", "updates", "loads", "stores", "schedules", "generates"};
const char* kAdjectives[] = {
    "other", "new", "good", "high", "old", "great", "big", "American", "small", "large", "national",
    "young", "different", "black", "long", "little", "important", "political", "bad", "white", "real",
    "best", "right", "social", "only", "public", "sure", "low", "early", "able", "human", "local", "late",
    "hard", "major", "better", "economic", "strong", "possible", "whole", "free", "military", "true",
    "federal", "international", "full", "special", "easy", "clear", "recent", "certain", "personal", "open",
    "red", "difficult", "available", "likely", "short", "single", "medical", "current", "wrong", "private",
    "past", "foreign", "fine", "common", "poor", "natural", "significant", "similar", "hot", "dead",
    "central", "happy", "serious", "ready", "simple", "left", "physical", "general", "environmental",
    "financial", "blue", "democratic", "dark", "various", "entire", "close", "legal", "religious", "cold",
    "final", "main", "green", "nice", "huge", "popular", "traditional", "cultural", "quiet", "careful",
    "efficient", "remarkable", "ancient", "curious", "brilliant", "fragile", "enormous", "subtle"};
const char* kAdverbs[] = {"quickly", "slowly", "carefully", "often", "rarely", "never", "always",
                          "probably", "certainly", "quietly", "suddenly", "finally", "already", "almost",
                          "really", "simply", "actually", "however", "therefore", "meanwhile"};
const char* kNames[] = {"Alice", "Bob", "Carol", "David", "Emma", "Frank", "Grace", "Henry", "Isabel",
                        "James", "Karen", "Louis", "Maria", "Nathan", "Olivia", "Peter", "London", "Paris",
                        "Tokyo", "Chicago", "Amazon", "Europe", "Monday", "October", "Einstein"};
const char* kConnectives[] = {"because", "although", "while", "when", "after", "before", "since", "unless",
                              "and", "but", "so", "yet", "whereas", "as soon as", "even though"};
const char* kPrepositions[] = {"in", "on", "at", "with", "from", "into", "during", "without", "about",
                               "under", "between", "through", "across", "behind", "beyond", "near"};
const char* kDeterminers[] = {"the", "a", "this", "that", "every", "each", "some", "no", "their", "our",
                              "his", "her", "its", "my", "your", "another", "one", "the same"};

template <size_t N>
const char* pick(const char* (&words)[N], std::mt19937& rng) {
  return words[std::uniform_int_distribution<size_t>(0, N - 1)(rng)];
}

std::string noun_phrase(std::mt19937& rng) {
  std::string s;
  const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
  if (kind == 0) return pick(kNames, rng);
  s = pick(kDeterminers, rng);
  if (kind < 5) s += std::string(" ") + pick(kAdjectives, rng);
  s += std::string(" ") + pick(kNouns, rng);
  if (kind == 9) s += "s";
  return s;
}

std::string sentence(std::mt19937& rng) {
  std::string s = noun_phrase(rng);
  auto coin = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng) == 0; };
  if (coin(4)) s += std::string(" ") + pick(kAdverbs, rng);
  s += std::string(" ") + pick(kVerbs, rng) + " " + noun_phrase(rng);
  if (coin(2)) s += std::string(" ") + pick(kPrepositions, rng) + " " + noun_phrase(rng);
  if (coin(3)) s += std::string(", ") + pick(kConnectives, rng) + " " + noun_phrase(rng) + " " +
                    pick(kVerbs, rng) + " " + noun_phrase(rng);
  if (coin(6)) s += " (about " + std::to_string(std::uniform_int_distribution<int>(2, 9999)(rng)) + " of them)";
  if (coin(8)) s += ", it's " + std::string(pick(kAdjectives, rng)) + ", isn't it";
  if (coin(10)) s = "\"" + s + "\", " + pick(kNames, rng) + " said";
  s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
  const int end = std::uniform_int_distribution<int>(0, 11)(rng);
  s += end == 0 ? "?" : end == 1 ? "!" : end == 2 ? "; " + noun_phrase(rng) + " " + pick(kVerbs, rng) + " " +
                                                       noun_phrase(rng) + "."
                                              : ".";
  return s;
}

// ~300 KB of text in paragraphs of ~1 KB.
const std::vector<std::string>& paragraphs() {
  static const std::vector<std::string> p = [] {
    std::mt19937 rng(20261122);
    std::vector<std::string> out;
    size_t total = 0;
    while (total < 300'000) {
      std::string para;
      while (para.size() < 900) {
        if (!para.empty()) para += ' ';
        para += sentence(rng);
      }
      para += "\n\n";
      total += para.size();
      out.push_back(std::move(para));
    }
    return out;
  }();
  return p;
}

const vlm::Tokenizer& tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<vlm::Tokenizer>> cache;
  auto& t = cache[name];
  if (!t) t = vlm::Tokenizer::load(std::string(VLM_SOURCE_DIR) + "/tests/data/tokenizers/" + name);
  return *t;
}

void BM_encode(benchmark::State& state, const std::string& name, bool cold) {
  const vlm::Tokenizer& tok = tokenizer(name);
  const auto& paras = paragraphs();
  size_t bytes = 0;
  for (const auto& p : paras) bytes += p.size();
  int64_t tokens = 0;
  tok.clear_cache();
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      tok.clear_cache();
      state.ResumeTiming();
    }
    for (const auto& p : paras) {
      auto ids = tok.encode(p, false);
      tokens += static_cast<int64_t>(ids.size());
      benchmark::DoNotOptimize(ids.data());
    }
  }
  const double passes = static_cast<double>(state.iterations());
  state.counters["MB_per_s"] = benchmark::Counter(passes * static_cast<double>(bytes) * 1e-6,
                                                  benchmark::Counter::kIsRate);
  state.counters["tok_per_s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
  state.counters["KB"] = static_cast<double>(bytes) / 1000.0;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  for (const char* name : {"llama2", "llama3", "qwen3"}) {
    tokenizer(name);  // load outside the timed runs
    for (bool cold : {true, false})
      benchmark::RegisterBenchmark((std::string("encode/") + name + (cold ? "/cold" : "/warm")).c_str(),
                                   BM_encode, std::string(name), cold)
          ->Unit(benchmark::kMillisecond);  // CPU time of the one thread: the machine is shared
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

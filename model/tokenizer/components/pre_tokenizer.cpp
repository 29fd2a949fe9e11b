#include "model/tokenizer/components/pre_tokenizer.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "model/tokenizer/components/byte_level.h"
#include "model/tokenizer/utf8.h"

namespace vlm {
namespace {

using nlohmann::json;

// GPT-2's word pattern, which ByteLevel uses when use_regex is set.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

void split_all(std::vector<PreToken>& pieces, const TextPattern& pattern, SplitBehavior behavior,
               bool invert) {
  std::vector<PreToken> out;
  out.reserve(pieces.size() * 2);
  std::vector<TextPattern::Match> matches;
  for (const PreToken& p : pieces) {
    matches.clear();
    pattern.find_all(p.text, matches);
    split_pre_token(p, matches, behavior, invert, out);
  }
  pieces = std::move(out);
}

class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex, const std::string& source)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex),
        pattern_(TextPattern::regex(kGpt2Pattern, source, "pre_tokenizer ByteLevel")) {}

  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    if (add_prefix_space_)
      for (PreToken& p : pieces)
        if (p.text.empty() || p.text[0] != ' ') p.text.insert(0, 1, ' ');
    if (use_regex_) split_all(pieces, pattern_, SplitBehavior::Isolated, false);
    std::string mapped;
    for (PreToken& p : pieces) {
      mapped.clear();
      byte_level::append_chars(p.text, mapped);
      p.text.swap(mapped);
    }
  }

 private:
  bool add_prefix_space_, use_regex_;
  TextPattern pattern_;
};

class Split final : public PreTokenizer {
 public:
  Split(TextPattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    split_all(pieces, pattern_, behavior_, invert_);
  }

 private:
  TextPattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

enum class PrependScheme { Always, First, Never };

// Spaces become `replacement`; a replacement is prepended per the scheme; then, with `split`,
// every replacement starts a new piece.
class Metaspace final : public PreTokenizer {
 public:
  Metaspace(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split),
        pattern_(TextPattern::literal(replacement_)) {}

  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    static const TextPattern space = TextPattern::literal(" ");
    for (PreToken& p : pieces) {
      p.text = space.replace_all(p.text, replacement_);
      const bool starts = p.text.starts_with(replacement_);
      if ((scheme_ == PrependScheme::Always && !starts) ||
          (scheme_ == PrependScheme::First && !starts && p.at_start))
        p.text.insert(0, replacement_);
    }
    if (split_) split_all(pieces, pattern_, SplitBehavior::MergedWithNext, false);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
  TextPattern pattern_;
};

class Sequence final : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    for (const auto& s : steps_) s->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

SplitBehavior parse_behavior(const json& j, const std::string& source) {
  const std::string b = j.is_string() ? j.get<std::string>() : "";
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  throw LoadError(source + ": pre_tokenizer Split: unknown behavior " + j.dump());
}

std::string single_char(const json& j, const char* key, const std::string& fallback,
                        const std::string& source) {
  if (!j.contains(key)) return fallback;
  if (!j[key].is_string()) throw LoadError(source + ": '" + std::string(key) + "' must be a string");
  std::string s = j[key].get<std::string>();
  size_t i = 0;
  if (s.empty() || !utf8::is_valid(s) || (utf8::next(s, i), i != s.size()))
    throw LoadError(source + ": '" + std::string(key) + "' must be one character, got '" + s + "'");
  return s;
}

}  // namespace

void split_pre_token(const PreToken& piece, const std::vector<TextPattern::Match>& matches,
                     SplitBehavior behavior, bool invert, std::vector<PreToken>& out) {
  const std::string& s = piece.text;
  if (s.empty()) return;
  struct Part {
    size_t begin, end;
    bool flag;  // is a match (before folding), removed (after)
  };
  thread_local std::vector<Part> parts, acc;
  parts.clear();
  acc.clear();
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev != b) parts.push_back({prev, b, invert});
    parts.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != s.size()) parts.push_back({prev, s.size(), invert});

  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (const Part& p : parts) acc.push_back({p.begin, p.end, false});
      break;
    case SplitBehavior::Removed:
      acc = parts;
      break;
    case SplitBehavior::MergedWithPrevious:
      for (const Part& p : parts) {
        if (p.flag && !previous_match && !acc.empty()) acc.back().end = p.end;
        else acc.push_back({p.begin, p.end, false});
        previous_match = p.flag;
      }
      break;
    case SplitBehavior::MergedWithNext:
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->flag && !previous_match && !acc.empty()) acc.back().begin = it->begin;
        else acc.push_back({it->begin, it->end, false});
        previous_match = it->flag;
      }
      std::reverse(acc.begin(), acc.end());
      break;
    case SplitBehavior::Contiguous:
      for (const Part& p : parts) {
        if (p.flag == previous_match && !acc.empty()) acc.back().end = p.end;
        else acc.push_back({p.begin, p.end, false});
        previous_match = p.flag;
      }
      break;
  }
  for (const Part& p : acc)
    if (!p.flag && p.end > p.begin)
      out.push_back({s.substr(p.begin, p.end - p.begin), piece.at_start && p.begin == 0});
}

std::unique_ptr<PreTokenizer> PreTokenizer::from_json(const json& j, const std::string& source) {
  if (j.is_null()) return nullptr;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    throw LoadError(source + ": pre_tokenizer must be an object with a string 'type'");
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel")
    return std::make_unique<ByteLevel>(j.value("add_prefix_space", true), j.value("use_regex", true),
                                       source);
  if (type == "Split") {
    if (!j.contains("pattern")) throw LoadError(source + ": pre_tokenizer Split: missing 'pattern'");
    return std::make_unique<Split>(TextPattern::from_json(j["pattern"], source, "pre_tokenizer Split"),
                                   parse_behavior(j.value("behavior", json()), source),
                                   j.value("invert", false));
  }
  if (type == "Metaspace") {
    PrependScheme scheme = j.value("add_prefix_space", true) ? PrependScheme::Always : PrependScheme::Never;
    if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
      const std::string s = j["prepend_scheme"].is_string() ? j["prepend_scheme"].get<std::string>() : "";
      if (s == "always") scheme = PrependScheme::Always;
      else if (s == "first") scheme = PrependScheme::First;
      else if (s == "never") scheme = PrependScheme::Never;
      else throw LoadError(source + ": pre_tokenizer Metaspace: unknown prepend_scheme " + j["prepend_scheme"].dump());
    }
    return std::make_unique<Metaspace>(single_char(j, "replacement", "\xE2\x96\x81", source), scheme,
                                       j.value("split", true));
  }
  if (type == "Digits") {
    // Digits are Unicode numbers (Rust's char::is_numeric); each its own piece, or runs of them.
    return std::make_unique<Split>(TextPattern::regex(R"(\p{N})", source, "pre_tokenizer Digits"),
                                   j.value("individual_digits", false) ? SplitBehavior::Isolated
                                                                       : SplitBehavior::Contiguous,
                                   false);
  }
  if (type == "Whitespace")  // keeps runs of word characters and runs of other non-space characters
    return std::make_unique<Split>(TextPattern::regex(R"(\w+|[^\w\s]+)", source, "pre_tokenizer Whitespace"),
                                   SplitBehavior::Removed, true);
  if (type == "WhitespaceSplit")
    return std::make_unique<Split>(TextPattern::regex(R"(\s)", source, "pre_tokenizer WhitespaceSplit"),
                                   SplitBehavior::Removed, false);
  if (type == "Sequence") {
    auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array())
      throw LoadError(source + ": pre_tokenizer Sequence: missing array 'pretokenizers'");
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const auto& s : *it)
      if (auto step = from_json(s, source)) steps.push_back(std::move(step));
    return std::make_unique<Sequence>(std::move(steps));
  }
  throw LoadError(source + ": pre_tokenizer type '" + type +
                  "' is not supported (supported: ByteLevel, Split, Metaspace, Digits, Whitespace, "
                  "WhitespaceSplit, Sequence)");
}

}  // namespace vlm

#include "model/tokenizer/components/token_decoder.h"

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "model/tokenizer/components/byte_level.h"
#include "model/tokenizer/components/text_pattern.h"
#include "model/tokenizer/utf8.h"

namespace vlm {
namespace {

using nlohmann::json;

// Every token back to the bytes its characters stand for (a token with a character outside the
// alphabet keeps its own bytes), all joined into one lossy UTF-8 string.
class ByteLevel final : public TokenDecoder {
 public:
  bool byte_level() const override { return true; }
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      const size_t mark = bytes.size();
      size_t i = 0;
      bool ok = true;
      while (i < t.size()) {
        const int b = byte_level::byte_of(utf8::next(t, i));
        if (b < 0) {
          ok = false;
          break;
        }
        bytes.push_back(static_cast<char>(b));
      }
      if (!ok) {
        bytes.resize(mark);
        bytes += t;
      }
    }
    tokens.assign(1, utf8::is_valid(bytes) ? std::move(bytes) : utf8::to_valid_lossy(bytes));
  }
};

// Runs of <0xXX> tokens become their bytes: the UTF-8 text they spell, or one U+FFFD per byte
// when they do not spell valid UTF-8.
class ByteFallback final : public TokenDecoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string run;
    auto flush = [&] {
      if (run.empty()) return;
      if (utf8::is_valid(run)) {
        out.push_back(run);
      } else {
        for (size_t k = 0; k < run.size(); ++k) out.emplace_back(utf8::kReplacement);
      }
      run.clear();
    };
    for (std::string& t : tokens) {
      int byte = -1;
      if (t.size() == 6 && t.starts_with("<0x") && t[5] == '>') byte = hex_byte(t[3], t[4]);
      if (byte >= 0) {
        run.push_back(static_cast<char>(byte));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }

 private:
  static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  static int hex_byte(char hi, char lo) {
    const int h = hex_digit(hi), l = hex_digit(lo);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
  }
};

class Fuse final : public TokenDecoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Per token: removes up to `start` leading and `stop` trailing `content` characters.
class Strip final : public TokenDecoder {
 public:
  Strip(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      size_t begin = 0, end = t.size();
      for (size_t k = 0; k < start_ && std::string_view(t).substr(begin).starts_with(content_); ++k)
        begin += content_.size();
      for (size_t k = 0; k < stop_ && end >= begin + content_.size() &&
                         std::string_view(t).substr(0, end).ends_with(content_);
           ++k)
        end -= content_.size();
      t = t.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class Replace final : public TokenDecoder {
 public:
  Replace(TextPattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) t = pattern_.replace_all(t, content_);
  }

 private:
  TextPattern pattern_;
  std::string content_;
};

// Replacement characters become spaces, except in the first token when a prefix was prepended
// at encoding (prepend_scheme other than "never"), where they are dropped.
class Metaspace final : public TokenDecoder {
 public:
  Metaspace(std::string replacement, bool prepended)
      : replacement_(std::move(replacement)), prepended_(prepended) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    const TextPattern pattern = TextPattern::literal(replacement_);
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = pattern.replace_all(tokens[i], i == 0 && prepended_ ? "" : " ");
  }

 private:
  std::string replacement_;
  bool prepended_;
};

// The end-of-word suffix becomes a space, except in the last token where it is dropped.
class BpeSuffix final : public TokenDecoder {
 public:
  explicit BpeSuffix(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    const TextPattern pattern = TextPattern::literal(suffix_);
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = pattern.replace_all(tokens[i], i + 1 == tokens.size() ? "" : " ");
  }

 private:
  std::string suffix_;
};

class Sequence final : public TokenDecoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<TokenDecoder>> steps) : steps_(std::move(steps)) {}
  bool byte_level() const override {
    for (const auto& s : steps_)
      if (s->byte_level()) return true;
    return false;
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& s : steps_) s->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<TokenDecoder>> steps_;
};

std::string string_field(const json& j, const char* key, const std::string& fallback,
                         const std::string& source, const std::string& type) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (!it->is_string())
    throw LoadError(source + ": decoder " + type + ": '" + key + "' must be a string");
  return it->get<std::string>();
}

size_t count_field(const json& j, const char* key, const std::string& source) {
  auto it = j.find(key);
  if (it == j.end()) return 0;
  if (!it->is_number_integer() || it->get<int64_t>() < 0)
    throw LoadError(source + ": decoder Strip: '" + key + "' must be a non-negative integer");
  return it->get<size_t>();
}

}  // namespace

std::unique_ptr<TokenDecoder> TokenDecoder::from_json(const json& j, const std::string& source) {
  if (j.is_null()) return nullptr;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    throw LoadError(source + ": decoder must be an object with a string 'type'");
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Strip")
    return std::make_unique<Strip>(string_field(j, "content", " ", source, type),
                                   count_field(j, "start", source), count_field(j, "stop", source));
  if (type == "Replace") {
    if (!j.contains("pattern")) throw LoadError(source + ": decoder Replace: missing 'pattern'");
    return std::make_unique<Replace>(TextPattern::from_json(j["pattern"], source, "decoder Replace"),
                                     string_field(j, "content", "", source, type));
  }
  if (type == "Metaspace") {
    bool prepended = j.value("add_prefix_space", true);
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string())
      prepended = j["prepend_scheme"].get<std::string>() != "never";
    return std::make_unique<Metaspace>(string_field(j, "replacement", "\xE2\x96\x81", source, type),
                                       prepended);
  }
  if (type == "BPEDecoder")
    return std::make_unique<BpeSuffix>(string_field(j, "suffix", "</w>", source, type));
  if (type == "Sequence") {
    auto it = j.find("decoders");
    if (it == j.end() || !it->is_array())
      throw LoadError(source + ": decoder Sequence: missing array 'decoders'");
    std::vector<std::unique_ptr<TokenDecoder>> steps;
    for (const json& s : *it)
      if (auto step = from_json(s, source)) steps.push_back(std::move(step));
    return std::make_unique<Sequence>(std::move(steps));
  }
  throw LoadError(source + ": decoder type '" + type +
                  "' is not supported (supported: ByteLevel, ByteFallback, Fuse, Strip, Replace, "
                  "Metaspace, BPEDecoder, Sequence)");
}

}  // namespace vlm

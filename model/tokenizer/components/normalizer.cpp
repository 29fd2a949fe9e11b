#include "model/tokenizer/components/normalizer.h"

#include <cstdlib>
#include <vector>

#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include "kernels/core/check.h"
#include "model/tokenizer/components/text_pattern.h"
#include "model/tokenizer/utf8.h"

namespace vlm {
namespace {

using nlohmann::json;

bool is_ascii(const std::string& s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

// NFC/NFD/NFKC/NFKD through utf8proc. ASCII text is already in every normal form.
class UnicodeForm final : public Normalizer {
 public:
  explicit UnicodeForm(int options) : options_(options) {}
  void normalize(std::string& text) const override {
    if (is_ascii(text)) return;
    utf8proc_uint8_t* out = nullptr;
    const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                static_cast<utf8proc_ssize_t>(text.size()), &out,
                                static_cast<utf8proc_option_t>(options_));
    VLM_CHECK(n >= 0, "utf8proc_map failed: {}", utf8proc_errmsg(n));
    text.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
  }

 private:
  int options_;
};

class Lowercase final : public Normalizer {
 public:
  void normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    size_t i = 0;
    while (i < text.size()) {
      const char32_t cp = utf8::next(text, i);
      utf8::append(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    }
    text = std::move(out);
  }
};

// Removes leading and/or trailing whitespace (Unicode White_Space).
class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        size_t i = begin;
        if (!utf8::is_whitespace(utf8::next(text, i))) break;
        begin = i;
      }
    }
    if (right_) {
      while (end > begin) {
        const char32_t cp = utf8::last(std::string_view(text).substr(begin, end - begin));
        if (!utf8::is_whitespace(cp)) break;
        std::string tmp;
        utf8::append(tmp, cp);
        end -= tmp.size();
      }
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

// Drops combining marks (category Mn), as tokenizers' StripAccents does (usually after NFD).
class StripAccents final : public Normalizer {
 public:
  void normalize(std::string& text) const override {
    if (is_ascii(text)) return;
    std::string out;
    out.reserve(text.size());
    size_t i = 0;
    while (i < text.size()) {
      const size_t start = i;
      const char32_t cp = utf8::next(text, i);
      if (utf8proc_category(static_cast<utf8proc_int32_t>(cp)) != UTF8PROC_CATEGORY_MN)
        out.append(text, start, i - start);
    }
    text = std::move(out);
  }
};

class Replace final : public Normalizer {
 public:
  Replace(TextPattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text) const override { text = pattern_.replace_all(text, content_); }

 private:
  TextPattern pattern_;
  std::string content_;
};

// Prepends `prepend` to non-empty text.
class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prepend) : prepend_(std::move(prepend)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prepend_);
  }

 private:
  std::string prepend_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void normalize(std::string& text) const override {
    for (const auto& s : steps_) s->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

std::string string_field(const json& j, const char* key, const std::string& source,
                         const std::string& type) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string())
    throw LoadError(source + ": normalizer " + type + ": missing string field '" + key + "'");
  return it->get<std::string>();
}

}  // namespace

std::unique_ptr<Normalizer> Normalizer::from_json(const json& j, const std::string& source) {
  if (j.is_null()) return nullptr;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    throw LoadError(source + ": normalizer must be an object with a string 'type'");
  const std::string type = j["type"].get<std::string>();
  if (type == "NFC") return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  if (type == "NFD") return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
  if (type == "NFKC")
    return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  if (type == "NFKD")
    return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Strip")
    return std::make_unique<Strip>(j.value("strip_left", true), j.value("strip_right", true));
  if (type == "Replace") {
    if (!j.contains("pattern"))
      throw LoadError(source + ": normalizer Replace: missing field 'pattern'");
    return std::make_unique<Replace>(TextPattern::from_json(j["pattern"], source, "normalizer Replace"),
                                     string_field(j, "content", source, type));
  }
  if (type == "Prepend") return std::make_unique<Prepend>(string_field(j, "prepend", source, type));
  if (type == "Sequence") {
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array())
      throw LoadError(source + ": normalizer Sequence: missing array 'normalizers'");
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const auto& s : *it) {
      auto step = from_json(s, source);
      if (step) steps.push_back(std::move(step));
    }
    return std::make_unique<Sequence>(std::move(steps));
  }
  throw LoadError(source + ": normalizer type '" + type +
                  "' is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, Strip, "
                  "StripAccents, Replace, Prepend, Sequence)");
}

}  // namespace vlm

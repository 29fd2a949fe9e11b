// A stand-in tokenizer for engine tests: token id -> a fixed string. Ids in `pieces` map to
// their string; any other id to "<id>". A piece can be a partial UTF-8 character: the decoder
// holds back incomplete bytes, as a real one must.
#pragma once

#include <map>
#include <stdexcept>
#include <string>

#include "engine/text_decoder.h"

namespace vlm::testing {

class FakeTextDecoder : public TextDecoder {
 public:
  FakeTextDecoder(const std::map<int32_t, std::string>* pieces, int32_t throw_on) : pieces_(pieces), throw_on_(throw_on) {}
  std::string push(int32_t id) override {
    if (id == throw_on_) throw std::runtime_error("fake decoder cannot decode token " + std::to_string(id));
    auto it = pieces_->find(id);
    pending_ += it != pieces_->end() ? it->second : "<" + std::to_string(id) + ">";
    // Emit up to the last complete UTF-8 character.
    size_t n = pending_.size(), i = n;
    while (i > 0 && (static_cast<unsigned char>(pending_[i - 1]) & 0xC0) == 0x80) --i;
    if (i > 0) {
      const auto lead = static_cast<unsigned char>(pending_[i - 1]);
      const size_t len = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
      if (n - (i - 1) < len) n = i - 1;
    }
    std::string out = pending_.substr(0, n);
    pending_.erase(0, n);
    return out;
  }
  std::string flush() override { return pending_.empty() ? "" : "\xEF\xBF\xBD"; }

 private:
  const std::map<int32_t, std::string>* pieces_;
  int32_t throw_on_;
  std::string pending_;
};

class FakeTextDecoderFactory : public TextDecoderFactory {
 public:
  explicit FakeTextDecoderFactory(std::map<int32_t, std::string> pieces, int32_t throw_on = -1)
      : pieces_(std::move(pieces)), throw_on_(throw_on) {}
  std::unique_ptr<TextDecoder> make(std::span<const int32_t>, bool) const override {
    return std::make_unique<FakeTextDecoder>(&pieces_, throw_on_);
  }

 private:
  std::map<int32_t, std::string> pieces_;
  int32_t throw_on_;
};

}  // namespace vlm::testing

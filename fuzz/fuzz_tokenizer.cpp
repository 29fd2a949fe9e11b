// Fuzzes the real Qwen3 tokenizer (tests/data/tokenizers/qwen3, fetched by
// scripts/fetch_test_data.sh) on arbitrary bytes: encode (with and without special tokens)
// never throws, every id is in the vocabulary, and decode of the ids gives back the text's NFC
// form (the tokenizer's normalizer; byte-level BPE is lossless) when the input is valid UTF-8
// and holds no '<' (added tokens such as <|im_start|> are matched before normalizing, which
// can shift NFC at their edges). Then the input read as token ids (some out of range) is
// decoded: out-of-range ids are a clean error or skipped.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_util.h"
#include "model/tokenizer/components/normalizer.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/utf8.h"

namespace {
const vlm::Tokenizer& tokenizer() {
  static std::unique_ptr<vlm::Tokenizer> t =
      vlm::Tokenizer::load(vlm::fuzz::source_dir() + "/tests/data/tokenizers/qwen3");
  return *t;
}
const vlm::Normalizer& nfc() {
  static std::unique_ptr<vlm::Normalizer> n = vlm::Normalizer::from_json(nlohmann::json{{"type", "NFC"}}, "fuzz");
  return *n;
}
}  // namespace

// The tokenizer loads once, here, outside the per-input timeout (seconds under ASan).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tokenizer();
  nfc();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& tok = tokenizer();
  std::string_view text(reinterpret_cast<const char*>(data), size);
  for (bool special : {false, true}) {
    std::vector<int32_t> ids = tok.encode(text, special);
    for (int32_t id : ids)
      if (id < 0 || id >= tok.vocab_size()) std::abort();
    std::string back = tok.decode(ids);
    if (!special && vlm::utf8::is_valid(text) && text.find('<') == std::string_view::npos) {
      std::string want(text);
      nfc().normalize(want);
      if (back != want) {
        std::fprintf(stderr, "fuzz: decode(encode(x)) != NFC(x)\n");
        std::abort();
      }
    }
  }
  std::vector<int32_t> raw(size / 4);
  if (!raw.empty()) std::memcpy(raw.data(), data, raw.size() * 4);
  vlm::fuzz::run_expecting_clean_errors([&] { tok.decode(raw, true); tok.decode(raw, false); });
  return 0;
}

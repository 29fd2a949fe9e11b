// Fuzzes the OpenAI JSON -> native request conversion (server/openai_request), chat and
// completions, with and without generation_config defaults.
#include <cstdint>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "server/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks the kind and the defaults; the rest is the body.
  const uint8_t sel = data[0];
  std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  vlm::SamplingDefaults defaults;
  if (sel & 2) {
    defaults.temperature = 0.7f;
    defaults.top_p = 0.8f;
    defaults.top_k = 20;
    defaults.repetition_penalty = 1.05f;
  }
  const auto kind = (sel & 1) ? vlm::ApiKind::Completion : vlm::ApiKind::Chat;
  vlm::fuzz::run_expecting_clean_errors([&] { vlm::parse_api_request(kind, body, defaults); });
  return 0;
}

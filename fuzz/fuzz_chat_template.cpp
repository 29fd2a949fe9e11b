// Fuzzes chat templates (model/chat/jinja through model/chat_template), two ways chosen by the
// first byte:
//  - even: the rest is a template's source (from a model directory: operator input), parsed
//    and, when it parses, rendered with a fixed conversation;
//  - odd: the rest is a request's `messages` JSON (user input), rendered with the real Qwen3
//    template (tests/data/tokenizers/qwen3) after the same validation and shaping the server does
//    (server/openai_request, server/chat_messages: the template's string format, or the parts
//    when bit 2 is set).
// Parse errors are LoadError, render errors RequestError; anything else is a finding.
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_util.h"
#include "model/chat/chat_template.h"
#include "server/chat_messages.h"
#include "server/openai_request.h"

namespace {
const vlm::ChatTemplate& qwen3() {
  static std::optional<vlm::ChatTemplate> t =
      vlm::ChatTemplate::load(vlm::fuzz::source_dir() + "/tests/data/tokenizers/qwen3");
  return *t;
}
const nlohmann::ordered_json& fixed_messages() {
  static const auto m = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "What is in"}, {"type": "image_url", "image_url": {"url": "x"}}]},
    {"role": "assistant", "content": "A cat.", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]},
    {"role": "tool", "content": "42"},
    {"role": "user", "content": "Thanks"}])");
  return m;
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  qwen3();
  fixed_messages();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  nlohmann::ordered_json context = {{"add_generation_prompt", true}, {"bos_token", "<s>"},
                                    {"eos_token", "</s>"}, {"enable_thinking", (data[0] & 2) != 0}};
  if ((data[0] & 1) == 0) {
    vlm::fuzz::run_expecting_clean_errors([&] {
      auto t = vlm::ChatTemplate::parse(rest, "fuzz");
      t.render(fixed_messages(), context);
    });
  } else {
    const auto& t = qwen3();
    vlm::fuzz::run_expecting_clean_errors([&] {
      // The server's path: the body's messages validated by parse_api_request, then rendered.
      std::string body = R"({"messages": )" + rest + "}";
      auto req = vlm::parse_api_request(vlm::ApiKind::Chat, body, {});
      vlm::ChatMessagesOptions o;
      o.format = (data[0] & 4) ? vlm::ChatContentFormat::OpenAI : t.content_format();
      t.render(vlm::prepare_chat_messages(req.messages, o), context);
    });
  }
  return 0;
}

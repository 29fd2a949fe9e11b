// Chat messages as OpenAI clients send them -> the messages a chat template reads, as vLLM's
// parse_chat_messages builds them (vllm/entrypoints/chat_utils.py) for the template's content
// format (model/chat/chat_content_format.h):
//   - content null or missing -> no parts: "" for a string-format template, [] for an OpenAI one;
//   - string format: the text parts joined with "\n"; media parts become the model's placeholder
//     text, all of a message's placeholders first, each followed by "\n" (vLLM's default, without
//     interleaving); OpenAI format: the parts ({"type": "text", "text"}, {"type": "image"}, ...);
//   - tool messages whose parts are all text get them joined with "\n" as a string (both formats);
//   - assistant tool_calls: null or [] dropped; each call's "arguments" JSON text parsed into an
//     object (HF templates read objects), text that is not JSON and non-objects -> {};
//   - developer messages become system messages when the template does not name the developer
//     role; the system messages are then merged into the first message (contents joined "\n\n")
//     if one is not first or there are several.
// Other message keys (name, tool_call_id, reasoning_content, ...) pass through.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "model/chat/chat_content_format.h"

namespace vlm {

struct ChatMessagesOptions {
  ChatContentFormat format = ChatContentFormat::String;
  std::string image_placeholder = "<image>";  // string format: the text an image part becomes
  std::string video_placeholder = "<video>";  // ... and a video part
  bool developer_role = false;  // the template names "developer": developer messages stay as they are
};

// One part of messages[i].content (where: "messages[i].content[k]") in canonical form for
// parse_api_request: a bare string -> {"type": "text", "text": s}; the text types text,
// input_text, output_text, refusal (its "refusal") and thinking (its "thinking") ->
// {"type": "text", "text": ...}; a part without "type" that holds "image_url" or "video_url" gets
// that type; other parts are returned as they are (the caller validates media parts).
// Returns nullopt for a text part whose text is null or missing (vLLM skips it).
// Throws RequestError(400) naming the field: a part that is neither a string nor an object, a
// missing or non-string type, a non-string text, and a type that is not text, image_url,
// video_url or video ("unsupported content part type").
std::optional<nlohmann::ordered_json> canonical_content_part(const nlohmann::ordered_json& part,
                                                             const std::string& where);

// Validates message keys besides role and content (where: "messages[i]"): tool_calls null or a
// list of {"function": {"name": string, "arguments": ...}}, tool_call_id null or a string.
// Throws RequestError(400) naming the field.
void validate_message_fields(const nlohmann::ordered_json& message, const std::string& where);

// The messages for the template. Input: messages as parse_api_request canonicalized them, with
// media parts replaced by {"type": "image"} / {"type": "video"} (ApiServer::render_chat).
nlohmann::ordered_json prepare_chat_messages(const nlohmann::ordered_json& messages, const ChatMessagesOptions& options);

// The text of the final message that continue_final_message continues (HF's rule): its content
// string, or the text of its last text part; "" when there is none.
std::string final_message_text(const nlohmann::ordered_json& messages);

}  // namespace vlm

// How a chat template reads a message's `content`: as one string, or as the OpenAI list of parts
// ({"type": "text", "text": ...}, {"type": "image"}, ...). The server hands each template the
// shape it reads (server/chat_messages.h), as vLLM's --chat-template-content-format does.
//
// Detection follows vLLM's rule (vllm/renderers/hf.py, _detect_content_format): a template is
// OpenAI-format when it loops over a message's content, i.e. it has
//   {% for m in M %} ... {% for x in m.content %}   (or m['content'], through filters such as
//                                                   selectattr, tests, or a slice), or
//   {% for x in content %}                          (a variable named content),
// where M is `messages` or a name assigned from it ({% set rest = messages[1:] %}, transitively).
// Every other template reads content as a string (e.g. Qwen3's and Llama 3's, which concatenate
// it), and so do templates that only test `content is string`.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "model/chat/jinja/template.h"

namespace vlm {

enum class ChatContentFormat {
  String,  // content is a string: text parts joined with "\n", media as placeholder text
  OpenAI,  // content is the list of parts
};

// "string" / "openai".
const char* chat_content_format_name(ChatContentFormat format);

// Parses --chat-template-content-format: "auto" gives nullopt (detect from the template),
// "string" and "openai" the format. Throws std::invalid_argument for any other value.
std::optional<ChatContentFormat> parse_chat_content_format(std::string_view value);

// The format the template reads (the rule above). Never fails.
ChatContentFormat detect_chat_content_format(const jinja::Template& tmpl);

// Whether the template knows the "developer" role: its source has the string literal
// "developer" (quoted, as vLLM checks). When it does not, developer messages are rendered as
// system messages (server/chat_messages.h).
bool template_supports_developer_role(std::string_view source);

}  // namespace vlm

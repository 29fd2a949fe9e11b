// Tool calls (OpenAI `tools` / `tool_choice`): the request's settings, the constraint that
// tool_choice "required" or a named function puts on the output, and the parsers that turn the
// model's text into `message.tool_calls` (whole replies) or `delta.tool_calls` (streams).
//
// Formats, chosen from the chat template (tool_call_format):
//  - Hermes (Qwen2 / Qwen2.5 / Qwen3 templates): <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>,
//    any number, with free text before them;
//  - Llama-3 JSON: the whole reply is {"name": N, "parameters": {...}} (optionally after
//    <|python_tag|>), or several separated by ";".
// tool_choice "required": the output is constrained to a JSON array of {"name", "parameters"}
// objects (vLLM's form) and parsed from it; a named function: the output is the arguments
// themselves, constrained to the function's parameters schema.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/structured/constraint_cache.h"

namespace vlm {

enum class ToolChoice { None, Auto, Required, Named };
enum class ToolCallFormat { Hermes, Llama3Json };

struct ToolSettings {
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // validated function tools
  ToolChoice choice = ToolChoice::None;
  std::string named;  // ToolChoice::Named: the function
  bool active() const { return choice != ToolChoice::None && !tools.empty(); }
};

// Parses `tools` and `tool_choice` of a chat request body. Throws RequestError(400) naming the
// field (an empty list, a tool without a name, an unknown named function, ...).
ToolSettings parse_tool_settings(const nlohmann::ordered_json& body);

// The constraint of tool_choice required / named (nullopt for auto and none).
std::optional<structured::ConstraintSpec> tool_constraint(const ToolSettings& t);

// The template's format: Hermes when it writes <tool_call>, else Llama-3 JSON.
ToolCallFormat tool_call_format(const std::string& chat_template_source);

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text
};

struct ToolOutput {
  std::string content;          // text outside the calls
  std::vector<ToolCall> calls;  // empty: the reply is plain content
};

// The reply of a request with tools active, split into content and calls.
ToolOutput parse_tool_output(const std::string& text, const ToolSettings& t, ToolCallFormat format);

// [{"id", "type": "function", "function": {"name", "arguments"}}...]; with_index adds "index"
// (stream deltas). ids are "call_" + random hex.
nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index);

// Streams the content of a tools reply: text that may begin a tool call is held back until it
// is known (Hermes: a prefix of "<tool_call>"; Llama-3: a reply starting with "{" or the python
// tag). Named functions stream their arguments as they come (arguments_delta).
class ToolCallStreamer {
 public:
  ToolCallStreamer(const ToolSettings& t, ToolCallFormat f) : t_(t), f_(f) {}
  // Content that can be sent now.
  std::string push(const std::string& text);
  // At the end: the held-back content and the calls.
  ToolOutput finish();

 private:
  const ToolSettings& t_;
  ToolCallFormat f_;
  std::string all_;       // every byte so far
  size_t sent_ = 0;       // bytes of all_ sent as content
  bool holding_ = false;  // a call has begun: nothing more is sent as content
};

}  // namespace vlm

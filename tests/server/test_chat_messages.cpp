// Conversations as OpenAI clients send them (issue 46), through server/chat_messages.h and the real
// chat templates: text parts, null content with tool calls, tool results as parts, developer
// messages. The Qwen3 tool round trip sent the OpenAI way (content null, arguments as JSON text,
// the tool result as parts) renders byte for byte what transformers rendered for the same
// conversation (tests/fixtures/jinja/qwen3_tools_reference.json); Llama 3, Qwen2-VL and Qwen2.5-VL
// render it too. Bad shapes are 400s naming the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "model/chat/chat_template.h"
#include "server/chat_messages.h"
#include "server/openai_request.h"

namespace vlm {
namespace {

using json = nlohmann::ordered_json;

std::string tokenizer_dir(const std::string& name) {
  return std::string(VLM_FIXTURES_DIR) + "/../data/tokenizers/" + name;
}
std::string fixtures(const std::string& rel) { return std::string(VLM_FIXTURES_DIR) + "/" + rel; }

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("missing " + path);
  return json::parse(in);
}

ChatTemplate load_template(const std::string& dir) {
  std::optional<ChatTemplate> t = ChatTemplate::load(dir);
  if (!t) throw std::runtime_error("no chat template in " + dir);
  return std::move(*t);
}

// What the server does: parse the body, then prepare the messages for the template.
json prepared(const json& messages, const ChatTemplate& t) {
  ApiRequest r = parse_api_request(ApiKind::Chat, json{{"messages", messages}}.dump(), {});
  ChatMessagesOptions o;
  o.format = t.content_format();
  o.developer_role = t.supports_developer_role();
  return prepare_chat_messages(r.messages, o);
}

std::string render(const ChatTemplate& t, const json& messages, const json& kwargs, const std::string& tok) {
  json ctx = ChatTemplate::special_tokens(tokenizer_dir(tok));
  for (auto it = kwargs.begin(); it != kwargs.end(); ++it) ctx[it.key()] = it.value();
  ctx["add_generation_prompt"] = true;
  return t.render(prepared(messages, t), ctx);
}

// The reference's tool round trip as an OpenAI client sends it.
json openai_shaped(json messages) {
  for (json& m : messages) {
    if (m.contains("tool_calls")) {
      if (m["content"] == "") m["content"] = nullptr;
      for (json& c : m["tool_calls"])
        if (!c["function"]["arguments"].is_string()) c["function"]["arguments"] = c["function"]["arguments"].dump();
    }
    if (m["role"] == "tool") m["content"] = json::array({json{{"type", "text"}, {"text", m["content"]}}});
    if (m["role"] == "system")
      m["content"] = json::array({json{{"type", "text"}, {"text", m["content"]}}});
  }
  return messages;
}

void require_tokenizers() {
  ASSERT_TRUE(std::filesystem::exists(tokenizer_dir("qwen3") + "/tokenizer_config.json"))
      << "tests/data/tokenizers is missing: run scripts/fetch_test_data.sh";
}

TEST(ChatMessages, Qwen3ToolRoundTripAsClientsSendItMatchesTransformers) {
  require_tokenizers();
  const ChatTemplate t = load_template(tokenizer_dir("qwen3"));
  ASSERT_EQ(t.content_format(), ChatContentFormat::String);
  const json ref = read_json(fixtures("jinja/qwen3_tools_reference.json"));
  int checked = 0;
  for (const json& c : ref["conversations"]) {
    const std::string name = c["name"];
    if (name != "tool_roundtrip" && name != "parallel_tools_no_system") continue;
    SCOPED_TRACE(name);
    const json sent = openai_shaped(c["messages"]);
    ASSERT_NE(sent.dump(), c["messages"].dump());
    EXPECT_EQ(render(t, sent, c["kwargs"], "qwen3"), c["gen"].get<std::string>());
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

TEST(ChatMessages, StringTemplatesGetTextPartsJoined) {
  require_tokenizers();
  const ChatTemplate qwen3 = load_template(tokenizer_dir("qwen3"));
  const json msgs = json::parse(R"([
    {"role": "system", "content": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}]},
    {"role": "user", "content": [{"type": "text", "text": "Hello"}, "there", {"type": "input_text", "text": "!"},
                                 {"type": "text", "text": null}]}])");
  const json p = prepared(msgs, qwen3);
  EXPECT_EQ(p[0]["content"], "Be brief.\nBe kind.");
  EXPECT_EQ(p[1]["content"], "Hello\nthere\n!");
  const std::string out = render(qwen3, msgs, json::object(), "qwen3");
  EXPECT_EQ(out, "<|im_start|>system\nBe brief.\nBe kind.<|im_end|>\n<|im_start|>user\nHello\nthere\n!<|im_end|>\n"
                 "<|im_start|>assistant\n");
  // Llama 3: the same conversation, and the tool round trip (content null -> "").
  const ChatTemplate llama3 = load_template(tokenizer_dir("llama3"));
  EXPECT_EQ(render(llama3, msgs, json::object(), "llama3"),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.\nBe kind.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHello\nthere\n!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  const json trip = openai_shaped(read_json(fixtures("jinja/qwen3_tools_reference.json"))["conversations"][0]["messages"]);
  const std::string l = render(llama3, trip, json::object(), "llama3");
  EXPECT_NE(l.find("<|start_header_id|>tool<|end_header_id|>\n\n{\"temp\": 18, \"sky\": \"clear\"}<|eot_id|>"),
            std::string::npos)
      << l;
  EXPECT_NE(l.find("<|start_header_id|>assistant<|end_header_id|>\n\n<|eot_id|>"), std::string::npos) << l;
}

TEST(ChatMessages, OpenAiTemplatesGetTheParts) {
  for (const char* dir : {"qwen2vl_server/qwen2_vl_chat", "qwen2vl_server/qwen2_5_vl_chat"}) {
    SCOPED_TRACE(dir);
    const ChatTemplate t = load_template(fixtures(dir));
    ASSERT_EQ(t.content_format(), ChatContentFormat::OpenAI);
    const json msgs = json::parse(R"([
      {"role": "user", "content": [{"type": "text", "text": "What is"}, {"type": "text", "text": " the weather?"}]},
      {"role": "assistant", "content": null,
       "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "18"}, {"type": "text", "text": "C"}]}])");
    const json p = prepared(msgs, t);
    EXPECT_EQ(p[0]["content"], msgs[0]["content"]);     // the parts as they are
    EXPECT_EQ(p[1]["content"], json::array());          // null: no parts
    EXPECT_EQ(p[1]["tool_calls"][0]["function"]["arguments"], json({{"city", "Paris"}}));
    EXPECT_EQ(p[2]["content"], "18\nC");                // tool text parts joined (vLLM)
    EXPECT_EQ(p[2]["tool_call_id"], "c1");
    json ctx = json::object();
    ctx["add_generation_prompt"] = true;
    EXPECT_EQ(t.render(p, ctx),
              "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is the weather?"
              "<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n<|im_start|>tool\n18\nC<|im_end|>\n<|im_start|>assistant\n");
  }
}

TEST(ChatMessages, MediaPartsInStringFormatArePlaceholdersFirst) {
  ChatMessagesOptions o;
  o.format = ChatContentFormat::String;
  o.image_placeholder = "<|vision_start|><|image_pad|><|vision_end|>";
  o.video_placeholder = "<V>";
  const json msgs = json::parse(R"([{"role": "user", "content": [{"type": "text", "text": "Compare"},
    {"type": "image"}, {"type": "text", "text": "and"}, {"type": "video"}]}, {"role": "user", "content": [{"type": "image"}]}])");
  const json p = prepare_chat_messages(msgs, o);
  EXPECT_EQ(p[0]["content"], "<|vision_start|><|image_pad|><|vision_end|>\n<V>\nCompare\nand");
  EXPECT_EQ(p[1]["content"], "<|vision_start|><|image_pad|><|vision_end|>");
  o.format = ChatContentFormat::OpenAI;
  EXPECT_EQ(prepare_chat_messages(msgs, o), msgs);
}

TEST(ChatMessages, DeveloperBecomesSystemWhereTheTemplateHasNoDeveloperRole) {
  require_tokenizers();
  const ChatTemplate qwen3 = load_template(tokenizer_dir("qwen3"));
  ASSERT_FALSE(qwen3.supports_developer_role());
  // Alone and first: just renamed.
  json p = prepared(json::parse(R"([{"role": "developer", "content": [{"type": "text", "text": "Rules."}]},
                                    {"role": "user", "content": "Hi"}])"),
                    qwen3);
  EXPECT_EQ(p, json::parse(R"([{"role": "system", "content": "Rules."}, {"role": "user", "content": "Hi"}])"));
  // With a system message, or not first: merged into one first system message.
  p = prepared(json::parse(R"([{"role": "system", "content": "Sys."}, {"role": "user", "content": "Hi"},
                               {"role": "developer", "content": "Dev."}])"),
               qwen3);
  EXPECT_EQ(p, json::parse(R"([{"role": "system", "content": "Sys.\n\nDev."}, {"role": "user", "content": "Hi"}])"));
  EXPECT_EQ(render(qwen3, json::parse(R"([{"role": "developer", "content": "Dev."}, {"role": "user", "content": "Hi"}])"),
                   json::object(), "qwen3"),
            "<|im_start|>system\nDev.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // A template that names the role keeps it.
  ChatMessagesOptions o;
  o.developer_role = true;
  EXPECT_EQ(prepare_chat_messages(json::parse(R"([{"role": "developer", "content": "D"}])"), o)[0]["role"], "developer");
}

TEST(ChatMessages, NullContentAndToolCallArguments) {
  ChatMessagesOptions o;
  const json msgs = json::parse(R"([{"role": "user"}, {"role": "assistant", "content": null, "tool_calls": []},
    {"role": "assistant", "tool_calls": null, "content": "a"},
    {"role": "assistant", "content": "", "tool_calls": [
      {"function": {"name": "f", "arguments": "not json"}}, {"function": {"name": "g", "arguments": null}},
      {"function": {"name": "h", "arguments": {"x": 1}}}]}])");
  const json p = prepare_chat_messages(msgs, o);
  EXPECT_EQ(p[0], json::parse(R"({"role": "user", "content": ""})"));
  EXPECT_EQ(p[1], json::parse(R"({"role": "assistant", "content": ""})"));  // [] tool_calls dropped
  EXPECT_EQ(p[2], json::parse(R"({"role": "assistant", "content": "a"})"));
  EXPECT_EQ(p[3]["tool_calls"][0]["function"]["arguments"], json::object());
  EXPECT_EQ(p[3]["tool_calls"][1]["function"]["arguments"], json::object());
  EXPECT_EQ(p[3]["tool_calls"][2]["function"]["arguments"], json({{"x", 1}}));
  o.format = ChatContentFormat::OpenAI;
  EXPECT_EQ(prepare_chat_messages(msgs, o)[0]["content"], json::array());
  EXPECT_EQ(final_message_text(json::parse(R"([{"role": "assistant", "content": [{"type": "text", "text": "a"},
    {"type": "image"}, {"type": "text", "text": "b"}, {"type": "image"}]}])")),
            "b");
  EXPECT_EQ(final_message_text(json::parse(R"([{"role": "assistant", "content": null}])")), "");
}

// A 400 naming `param`.
void expect_bad(const std::string& messages, const std::string& param) {
  SCOPED_TRACE(messages);
  try {
    parse_api_request(ApiKind::Chat, R"({"messages": )" + messages + "}", {});
    ADD_FAILURE() << "accepted";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), param) << e.what();
  }
}

TEST(ChatMessages, BadShapesAre400sNamingTheField) {
  expect_bad(R"([{"role": "user", "content": 5}])", "messages[0].content");
  expect_bad(R"([{"role": "user", "content": {"type": "text", "text": "x"}}])", "messages[0].content");
  expect_bad(R"([{"role": "user", "content": [{"type": "audio_url", "audio_url": {"url": "x"}}]}])",
             "messages[0].content[0].type");
  expect_bad(R"([{"role": "user", "content": [{"type": 3}]}])", "messages[0].content[0].type");
  expect_bad(R"([{"role": "user", "content": [{"text": "no type"}]}])", "messages[0].content[0].type");
  expect_bad(R"([{"role": "user", "content": [7]}])", "messages[0].content[0]");
  expect_bad(R"([{"role": "user", "content": [{"type": "text", "text": 7}]}])", "messages[0].content[0].text");
  expect_bad(R"([{"role": "user", "content": [{"type": "refusal", "refusal": []}]}])", "messages[0].content[0].refusal");
  expect_bad(R"([{"role": "assistant", "content": null, "tool_calls": {}}])", "messages[0].tool_calls");
  expect_bad(R"([{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}])",
             "messages[0].tool_calls[0].function.name");
  expect_bad(R"([{"role": "assistant", "tool_calls": [{"type": "function"}]}])", "messages[0].tool_calls[0].function");
  expect_bad(R"([{"role": "tool", "tool_call_id": 5, "content": "x"}])", "messages[0].tool_call_id");
  // Accepted: every role without content, type-less image parts, refusal and thinking parts.
  const ApiRequest r = parse_api_request(ApiKind::Chat, R"({"messages": [{"role": "user"}, {"role": "system", "content": null},
    {"role": "user", "content": [{"image_url": {"url": "data:x"}}, {"type": "refusal", "refusal": "no"},
                                 {"type": "thinking", "thinking": "hmm"}]}]})",
                                         {});
  EXPECT_EQ(r.messages[2]["content"], json::parse(R"([{"image_url": {"url": "data:x"}, "type": "image_url"},
    {"type": "text", "text": "no"}, {"type": "text", "text": "hmm"}])"));
}

}  // namespace
}  // namespace vlm

// ChatTemplate against Hugging Face: every rendering of tests/fixtures/tokenizer/
// template_reference.json (transformers' apply_chat_template over conversations.json, for the
// real llama3 and qwen3 templates and two media templates) must match byte for byte, and so
// must the Qwen3 tool-calling / reasoning conversations of
// tests/fixtures/jinja/qwen3_tools_reference.json. Also: where templates are found, load errors,
// request errors.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "model/chat/chat_template.h"

namespace vlm {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

std::string fixtures(const std::string& rel) { return std::string(VLM_FIXTURES_DIR) + "/" + rel; }
std::string tokenizer_dir(const std::string& name) {
  return std::string(VLM_FIXTURES_DIR) + "/../data/tokenizers/" + name;
}

ordered_json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("missing " + path);
  return ordered_json::parse(in);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void require_tokenizer_data() {
  ASSERT_TRUE(fs::exists(tokenizer_dir("qwen3") + "/tokenizer_config.json"))
      << "tests/data/tokenizers is missing: run scripts/fetch_test_data.sh";
}

// The context apply_chat_template builds: the tokenizer's special tokens, the extra kwargs,
// add_generation_prompt.
ordered_json context_for(const std::string& tokenizer, const ordered_json& kwargs, bool gen) {
  ordered_json ctx = ChatTemplate::special_tokens(tokenizer_dir(tokenizer));
  for (auto it = kwargs.begin(); it != kwargs.end(); ++it) ctx[it.key()] = it.value();
  ctx["add_generation_prompt"] = gen;
  return ctx;
}

TEST(ChatTemplate, MatchesTransformersOnEveryCommittedConversation) {
  require_tokenizer_data();
  ordered_json refs = read_json(fixtures("tokenizer/template_reference.json"));
  std::map<std::string, ordered_json> conversations;
  for (const auto& c : read_json(fixtures("tokenizer/conversations.json"))) conversations[c["name"]] = c["messages"];
  int checked = 0;
  for (auto it = refs.begin(); it != refs.end(); ++it) {
    const ordered_json& ref = it.value();
    std::string tokenizer = ref["tokenizer"];
    std::string file = ref["template"];
    std::optional<ChatTemplate> tmpl =
        file == "tokenizer_config" ? ChatTemplate::load(tokenizer_dir(tokenizer))
                                   : ChatTemplate::parse(read_text(fixtures("tokenizer/" + file)), file);
    ASSERT_TRUE(tmpl) << it.key();
    for (auto r = ref["renders"].begin(); r != ref["renders"].end(); ++r) {
      SCOPED_TRACE(it.key() + " / " + r.key());
      const ordered_json& messages = conversations.at(r.key());
      EXPECT_EQ(tmpl->render(messages, context_for(tokenizer, ref["kwargs"], true)), r.value()["gen"].get<std::string>());
      EXPECT_EQ(tmpl->render(messages, context_for(tokenizer, ref["kwargs"], false)), r.value()["nogen"].get<std::string>());
      checked += 2;
    }
  }
  EXPECT_GE(checked, 60);
}

TEST(ChatTemplate, Qwen3ToolCallsAndReasoning) {
  require_tokenizer_data();
  std::optional<ChatTemplate> tmpl = ChatTemplate::load(tokenizer_dir("qwen3"));
  ASSERT_TRUE(tmpl);
  ordered_json ref = read_json(fixtures("jinja/qwen3_tools_reference.json"));
  ASSERT_GE(ref["conversations"].size(), 9u);
  for (const auto& c : ref["conversations"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    EXPECT_EQ(tmpl->render(c["messages"], context_for("qwen3", c["kwargs"], true)), c["gen"].get<std::string>());
    EXPECT_EQ(tmpl->render(c["messages"], context_for("qwen3", c["kwargs"], false)), c["nogen"].get<std::string>());
  }
}

TEST(ChatTemplate, SpecialTokensFromTokenizerConfig) {
  require_tokenizer_data();
  ordered_json llama2 = ChatTemplate::special_tokens(tokenizer_dir("llama2"));
  EXPECT_EQ(llama2["bos_token"], "<s>");
  EXPECT_EQ(llama2["eos_token"], "</s>");
  EXPECT_EQ(llama2["unk_token"], "<unk>");
  EXPECT_FALSE(llama2.contains("pad_token"));  // null in the config: not passed
  ordered_json qwen3 = ChatTemplate::special_tokens(tokenizer_dir("qwen3"));
  EXPECT_FALSE(qwen3.contains("bos_token"));
  EXPECT_EQ(qwen3["eos_token"], "<|im_end|>");
  EXPECT_EQ(qwen3["additional_special_tokens"].size(), 13u);
  EXPECT_TRUE(ChatTemplate::special_tokens("/nonexistent").empty());
  EXPECT_FALSE(ChatTemplate::load(tokenizer_dir("llama2")));  // llama2's config has no template
}

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("vlm_chat_template_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++))) {
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
  }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

std::string render_plain(const ChatTemplate& t) {
  return t.render(ordered_json::parse(R"([{"role": "user", "content": "hi"}])"), ordered_json::object());
}

TEST(ChatTemplateLoad, PrecedenceAndFormats) {
  TempDir dir;
  EXPECT_FALSE(ChatTemplate::load(dir.str()));
  dir.write("chat_template.json", R"({"chat_template": "json:{{ messages[0].content }}"})");
  EXPECT_EQ(render_plain(*ChatTemplate::load(dir.str())), "json:hi");
  dir.write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  EXPECT_EQ(render_plain(*ChatTemplate::load(dir.str())), "json:hi");  // config without a template
  dir.write("tokenizer_config.json",
            R"({"chat_template": [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "default:{{ messages | length }}"}]})");
  EXPECT_EQ(render_plain(*ChatTemplate::load(dir.str())), "default:1");
  dir.write("tokenizer_config.json", R"({"chat_template": "config:{{ add_generation_prompt }}"})");
  EXPECT_EQ(render_plain(*ChatTemplate::load(dir.str())), "config:False");
  // transformers lets chat_template.jinja override the config's template; one trailing newline
  // of a template file is dropped like jinja2 does.
  dir.write("chat_template.jinja", "jinja:{{ tools is none }}\n");
  std::optional<ChatTemplate> t = ChatTemplate::load(dir.str());
  EXPECT_EQ(render_plain(*t), "jinja:True");
  EXPECT_NE(t->origin().find("chat_template.jinja"), std::string::npos);
}

std::string load_error(const TempDir& dir) {
  try {
    ChatTemplate::load(dir.str());
  } catch (const LoadError& e) {
    return e.what();
  }
  return "";
}

TEST(ChatTemplateLoad, ErrorsNameTheFileLineAndColumn) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"chat_template": "{% for m in messages %}\n{{ m.content | nosuch }}{% endfor %}"})");
  std::string e = load_error(dir);
  EXPECT_NE(e.find("tokenizer_config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("line 2, column 16"), std::string::npos) << e;
  EXPECT_NE(e.find("nosuch"), std::string::npos) << e;

  dir.write("tokenizer_config.json", R"({"chat_template": "{% if x %}never closed"})");
  e = load_error(dir);
  EXPECT_NE(e.find("endif"), std::string::npos) << e;

  dir.write("tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "x"}]})");
  EXPECT_NE(load_error(dir).find("default"), std::string::npos);
  dir.write("tokenizer_config.json", R"({"chat_template": 3})");
  EXPECT_NE(load_error(dir).find("tokenizer_config.json"), std::string::npos);
  dir.write("tokenizer_config.json", "{not json");
  EXPECT_NE(load_error(dir).find("invalid JSON"), std::string::npos);

  dir.write("chat_template.jinja", "ok\n{{ 'a' ~ }}");
  e = load_error(dir);
  EXPECT_NE(e.find("chat_template.jinja: line 2, column 10"), std::string::npos) << e;
}

TEST(ChatTemplateRender, RequestErrorsForBadInput) {
  ChatTemplate t = ChatTemplate::parse(
      "{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}"
      "{{ raise_exception('Unknown role: ' ~ m.role) }}{% endif %}{{ m.content.strip() }}{% endfor %}",
      "test.jinja");
  auto request_error = [&](const char* messages) -> std::optional<RequestError> {
    try {
      t.render(ordered_json::parse(messages), ordered_json::object());
    } catch (const RequestError& e) {
      return e;
    }
    return std::nullopt;
  };
  std::optional<RequestError> e = request_error(R"([{"role": "robot", "content": "x"}])");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status(), 400);
  EXPECT_EQ(e->type(), "invalid_request_error");
  EXPECT_EQ(e->param(), "messages");
  EXPECT_NE(std::string(e->what()).find("Unknown role: robot"), std::string::npos) << e->what();

  e = request_error(R"([{"role": "user", "content": [{"type": "text", "text": "x"}]}])");
  ASSERT_TRUE(e);  // a list has no strip(): the input does not fit this template
  EXPECT_NE(std::string(e->what()).find("line 1"), std::string::npos) << e->what();
  EXPECT_FALSE(request_error(R"([{"role": "user", "content": " ok "}])"));
}

TEST(ChatTemplateRender, KeyOrderOfOrderedJsonReachesTojson) {
  ChatTemplate t = ChatTemplate::parse("{{ tools[0] | tojson }}", "t");
  const char* tools = R"([{"type": "function", "function": {"name": "f", "parameters": {}}}])";
  EXPECT_EQ(t.render(ordered_json::array(), ordered_json{{"tools", ordered_json::parse(tools)}}),
            R"({"type": "function", "function": {"name": "f", "parameters": {}}})");
  // nlohmann::json sorts keys: the overload still works, in sorted order.
  EXPECT_EQ(t.render(nlohmann::json::array(), nlohmann::json{{"tools", nlohmann::json::parse(tools)}}),
            R"({"function": {"name": "f", "parameters": {}}, "type": "function"})");
}

}  // namespace
}  // namespace vlm

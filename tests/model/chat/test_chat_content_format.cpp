// detect_chat_content_format (model/chat/chat_content_format.h) over the real templates the tests
// have: Qwen3's and Llama 3's (tests/data/tokenizers) read content as a string; the Qwen2-VL,
// Qwen2.5-VL, LLaVA, LLaVA-OneVision and test media templates (tests/fixtures) loop over its
// parts. Then the rule's cases one by one (aliases, slices, filters, macros, a bare `content`),
// the flag's parser, and the developer-role check.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "model/chat/chat_content_format.h"
#include "model/chat/chat_template.h"

namespace vlm {
namespace {

namespace fs = std::filesystem;

std::string fixtures(const std::string& rel) { return std::string(VLM_FIXTURES_DIR) + "/" + rel; }

ChatContentFormat format_of_dir(const std::string& dir) {
  std::optional<ChatTemplate> t = ChatTemplate::load(dir);
  if (!t) throw std::runtime_error("no chat template in " + dir);
  return t->content_format();
}

ChatContentFormat format_of(const std::string& source) {
  return detect_chat_content_format(jinja::Template::parse(source));
}

TEST(ChatContentFormat, RealTemplates) {
  const std::string tok = std::string(VLM_FIXTURES_DIR) + "/../data/tokenizers/";
  ASSERT_TRUE(fs::exists(tok + "qwen3/tokenizer_config.json")) << "run scripts/fetch_test_data.sh";
  EXPECT_EQ(format_of_dir(tok + "qwen3"), ChatContentFormat::String);  // concatenates content
  EXPECT_EQ(format_of_dir(tok + "llama3"), ChatContentFormat::String);  // content | trim
  for (const char* dir : {"qwen2vl_server/qwen2_vl_chat", "qwen2vl_server/qwen2_5_vl_chat", "llava_onevision/ov_tiny",
                          "hf5_layout/llava", "hf5_layout/qwen2_vl", "hf5_layout/qwen2_5_vl"}) {
    SCOPED_TRACE(dir);
    EXPECT_EQ(format_of_dir(fixtures(dir)), ChatContentFormat::OpenAI);
  }
  for (const char* file : {"tokenizer/chatml_vision.jinja", "tokenizer/vicuna_media.jinja"}) {
    SCOPED_TRACE(file);
    std::ifstream in(fixtures(file));
    const std::string src((std::istreambuf_iterator<char>(in)), {});
    ASSERT_FALSE(src.empty());
    EXPECT_EQ(format_of(src), ChatContentFormat::OpenAI);
  }
}

TEST(ChatContentFormat, TheRule) {
  using F = ChatContentFormat;
  // Content used as a string, or only tested: string.
  EXPECT_EQ(format_of("{% for m in messages %}{{ m.content }}{% endfor %}"), F::String);
  EXPECT_EQ(format_of("{% for m in messages %}{{ m['content'] + '!' }}{% endfor %}"), F::String);
  EXPECT_EQ(format_of("{% if messages[0].content is string %}x{% endif %}"), F::String);
  EXPECT_EQ(format_of("plain text"), F::String);
  // A loop over a message's content: openai (attribute or item, filters, tests, slices).
  EXPECT_EQ(format_of("{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}"), F::OpenAI);
  EXPECT_EQ(format_of("{% for m in messages %}{% for p in m['content'] %}{% endfor %}{% endfor %}"), F::OpenAI);
  EXPECT_EQ(format_of("{% for m in messages %}{% for p in m.content | selectattr('type', 'equalto', 'image') %}"
                      "{% endfor %}{% endfor %}"),
            F::OpenAI);
  EXPECT_EQ(format_of("{% for m in messages %}{% for p in m.content[1:] %}{% endfor %}{% endfor %}"), F::OpenAI);
  EXPECT_EQ(format_of("{% for m in messages %}{% for p in m.content if p.type == 'text' %}{% endfor %}{% endfor %}"),
            F::OpenAI);
  // The messages under other names, transitively; loops inside if branches and macros.
  EXPECT_EQ(format_of("{% set a = messages[1:] %}{% set b = a %}{% for m in b %}{% if true %}"
                      "{% for p in m.content %}{% endfor %}{% endif %}{% endfor %}"),
            F::OpenAI);
  EXPECT_EQ(format_of("{% for m in messages|reverse %}{% for p in m.content %}{% endfor %}{% endfor %}"), F::OpenAI);
  EXPECT_EQ(format_of("{% macro show(content) %}{% for item in content %}{{ item }}{% endfor %}{% endmacro %}"
                      "{% for m in messages %}{{ show(m.content) }}{% endfor %}"),
            F::OpenAI);
  // A loop over some other list's content is not the messages' (vLLM's rule): string.
  EXPECT_EQ(format_of("{% for d in documents %}{% for p in d.content %}{% endfor %}{% endfor %}"), F::String);
  EXPECT_EQ(format_of("{% for m in messages %}{% for p in m.parts %}{% endfor %}{% endfor %}"), F::String);
}

TEST(ChatContentFormat, FlagAndDeveloperRole) {
  EXPECT_EQ(parse_chat_content_format("auto"), std::nullopt);
  EXPECT_EQ(parse_chat_content_format("string"), ChatContentFormat::String);
  EXPECT_EQ(parse_chat_content_format("openai"), ChatContentFormat::OpenAI);
  EXPECT_THROW(parse_chat_content_format("list"), std::invalid_argument);
  EXPECT_STREQ(chat_content_format_name(ChatContentFormat::OpenAI), "openai");
  EXPECT_STREQ(chat_content_format_name(ChatContentFormat::String), "string");
  EXPECT_TRUE(template_supports_developer_role("{% if m.role == 'developer' %}"));
  EXPECT_TRUE(template_supports_developer_role("{% if m.role == \"developer\" %}"));
  EXPECT_FALSE(template_supports_developer_role("{# developer notes #}{{ m.role }}"));
}

}  // namespace
}  // namespace vlm

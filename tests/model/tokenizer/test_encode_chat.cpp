// Tokenizer::encode_chat against Hugging Face (tests/fixtures/hf5_layout/bos_cases.json, from
// tools/fixtures/make_hf5_layout_fixtures.py with transformers 5.17): Llama-2 and Llama-3 chat
// prompts whose templates do and do not write {{ bos_token }}. Without it, the ids are the
// processor's (special tokens on: Llama-2's BOS added, Llama-3's post-processor adds none); with
// it, one BOS, as HF's apply_chat_template(tokenize=True) gives (its processor call would add a
// second one). No prompt starts with two BOS.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "model/chat/chat_template.h"
#include "model/tokenizer/tokenizer.h"

namespace vlm {
namespace {

using nlohmann::json;

TEST(EncodeChat, LlamaPromptsMatchHfWithOneBos) {
  const json all = json::parse(std::ifstream(std::string(VLM_FIXTURES_DIR) + "/hf5_layout/bos_cases.json"));
  int checked = 0;
  for (const auto& c : all) {
    const std::string tk = c["tokenizer"].get<std::string>();
    if (tk == "llava") continue;
    const std::string name = c["name"].get<std::string>();
    const auto tok = Tokenizer::load(std::string(VLM_FIXTURES_DIR) + "/../data/tokenizers/" + tk);
    const ChatTemplate tmpl = ChatTemplate::parse(c["template"].get<std::string>(), name);
    json context{{"add_generation_prompt", true}, {"bos_token", tok->bos_token()}, {"eos_token", tok->eos_token()}};
    const std::string text = tmpl.render(c["messages"], context);
    ASSERT_EQ(text, c["rendered"].get<std::string>()) << name;
    const bool template_writes_bos = name.ends_with("_bos") && !name.ends_with("no_bos");
    const auto want = c[template_writes_bos ? "tokenizer_apply_chat_template_ids" : "processor_ids"]
                          .get<std::vector<int32_t>>();
    const std::vector<int32_t> ids = tok->encode_chat(text);
    EXPECT_EQ(ids, want) << name;
    ASSERT_TRUE(tok->bos_id().has_value());
    ASSERT_GE(ids.size(), 2u);
    EXPECT_FALSE(ids[0] == *tok->bos_id() && ids[1] == *tok->bos_id()) << name << ": two BOS";
    if (!template_writes_bos) EXPECT_EQ(ids, c["processor_ids"].get<std::vector<int32_t>>()) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 4);
}

// A tokenizer without BOS (Qwen's) adds nothing either way.
TEST(EncodeChat, NoBosTokenAddsNothing) {
  const auto tok = Tokenizer::load(std::string(VLM_FIXTURES_DIR) + "/../data/tokenizers/qwen3");
  const std::string text = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(tok->encode_chat(text), tok->encode(text, false));
}

}  // namespace
}  // namespace vlm

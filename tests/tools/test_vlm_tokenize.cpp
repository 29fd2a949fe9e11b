// vlm-tokenize as a user runs it: ids and text equal the Hugging Face references for the three
// real tokenizers (encode with and without special tokens, decode with and without skipping
// them); bad input is a usage error (exit 2), a missing model a load error naming the file (1).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

namespace vlm {
namespace {

using nlohmann::json;

struct Result {
  int exit_code;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result run(const std::string& args, const std::string& input) {
  const std::string dir = ::testing::TempDir();
  const std::string in = dir + "/vlm_tokenize_in", out = dir + "/vlm_tokenize_out",
                    err = dir + "/vlm_tokenize_err";
  std::ofstream(in, std::ios::binary) << input;
  const std::string cmd = std::string(VLM_BIN_DIR) + "/vlm-tokenize " + args + " < " + in + " > " +
                          out + " 2> " + err;
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

std::string model_dir(const std::string& name) {
  return std::string(VLM_FIXTURES_DIR) + "/../data/tokenizers/" + name;
}

const json& fixture(const std::string& file) {
  static std::map<std::string, json> cache;
  auto& j = cache[file];
  if (j.is_null()) j = json::parse(slurp(std::string(VLM_FIXTURES_DIR) + "/tokenizer/" + file));
  return j;
}

size_t line_index(const std::string& starts_with) {
  const json& corpus = fixture("corpus.json");
  for (size_t i = 0; i < corpus.size(); ++i)
    if (corpus[i].get<std::string>().starts_with(starts_with)) return i;
  ADD_FAILURE() << "no corpus line starts with " << starts_with;
  return 0;
}

TEST(VlmTokenize, MatchesHuggingFaceReferences) {
  for (const char* name : {"llama2", "llama3", "qwen3"}) {
    const json& ref = fixture("tokenizer_reference.json")[name];
    const std::string model = "--model " + model_dir(name);
    const size_t special = line_index("Special tokens in text");
    for (size_t i : {special, line_index("Emoji:"), line_index("中文")}) {
      const std::string line = fixture("corpus.json")[i];
      Result r = run(model, line);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(r.out, ref["encode"][i].dump() + "\n") << name << " line " << i;
      r = run(model + " --decode", ref["encode_plain"][i].dump());
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(r.out, ref["decode"][i].get<std::string>()) << name << " line " << i;
      if (i != special) continue;
      r = run(model + " --no-special", line);
      EXPECT_EQ(r.out, ref["encode_plain"][i].dump() + "\n") << name << " line " << i;
      r = run(model + " --decode --skip-special", ref["encode"][i].dump());
      EXPECT_EQ(r.out, ref["decode_skip"][i].get<std::string>()) << name << " line " << i;
    }
  }
}

TEST(VlmTokenize, BadInputIsAUsageError) {
  Result r = run("", "x");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--model is required"), std::string::npos) << r.err;
  r = run("--model " + model_dir("qwen3") + " --frobnicate", "x");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown argument '--frobnicate'"), std::string::npos) << r.err;
  r = run("--model " + model_dir("llama2") + " --decode", "[1, 2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("expected a JSON array of token ids"), std::string::npos) << r.err;
  r = run("--model " + model_dir("llama2") + " --decode", "[1, 32000]");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("token id 32000 outside the vocabulary (size 32000)"), std::string::npos) << r.err;
}

// --chat renders a conversation file with the model's own template: the ids equal
// transformers' apply_chat_template + tokenize (tests/fixtures/tokenizer/template_reference.json).
TEST(VlmTokenize, ChatFileMatchesApplyChatTemplate) {
  const json& refs = fixture("template_reference.json");
  const json& convs = fixture("conversations.json");
  for (const char* name : {"qwen3", "llama3"}) {
    const json& c = refs[name];
    for (const auto& conv : convs) {
      if (!c["renders"].contains(conv["name"].get<std::string>())) continue;
      const std::string path = ::testing::TempDir() + "conv.json";
      std::ofstream(path) << conv["messages"].dump();
      const Result r = run("--model " + model_dir(c["tokenizer"]) + " --chat " + path, "");
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(json::parse(r.out), c["renders"][conv["name"].get<std::string>()]["gen_ids"]) << name << " " << conv["name"];
    }
  }
  EXPECT_EQ(run("--model " + model_dir("llama3") + " --chat /nonexistent.json", "").exit_code, 2);
}

TEST(VlmTokenize, MissingModelIsALoadError) {
  const Result r = run("--model /nonexistent/dir", "x");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent/dir/tokenizer.json: cannot open"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace vlm

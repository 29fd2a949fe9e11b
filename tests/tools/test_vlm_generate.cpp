// vlm-generate as a user runs it: the printed greedy tokens equal Hugging Face's, bad arguments
// give a usage error (exit 2), and a broken model directory a load error naming the file (exit 1).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "model/chat/chat_template.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/support/decoder_harness.h"
#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

using Result = CommandResult;  // output: stdout and stderr

// The exact path (--dtype float32: Hugging Face parity) unless args choose a dtype.
Result run(const std::string& args) {
  const bool dtype_given = args.find("--dtype") != std::string::npos || args.find("--gemm-activations") != std::string::npos;
  return run_command(std::string(VLM_BIN_DIR) + "/vlm-generate " + args + (dtype_given ? "" : " --dtype float32") + " 2>&1");
}

std::string join(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

TEST(VlmGenerate, PrintsHuggingFaceGreedyTokens) {
  for (const char* model : {"qwen2_tiny", "llama3_tiny"}) {
    Reference ref = load_reference(model);
    const std::vector<int32_t> want = ref.greedy(2);
    const Result r = run("--model " + fixture_model_dir(model) + " --prompt-ids " + join(ref.ids(2)) +
                         " --max-tokens " + std::to_string(want.size()) +
                         " --ignore-eos --chunk-size 16 --threads 2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("generated: " + join(want) + "\n"), std::string::npos) << r.output;
  }
  // --prompt-ids @FILE: the same prompt from a file, ids separated by newlines and spaces.
  Reference ref = load_reference("qwen2_tiny");
  const std::vector<int32_t> want = ref.greedy(2);
  const std::string file = ::testing::TempDir() + "vlm_generate_ids_" + std::to_string(::getpid());
  {
    std::ofstream out(file);
    for (int32_t id : ref.ids(2)) out << id << (id % 2 ? "\n" : " ");
  }
  const Result r = run("--model " + fixture_model_dir("qwen2_tiny") + " --prompt-ids @" + file + " --max-tokens " +
                       std::to_string(want.size()) + " --ignore-eos --threads 2");
  std::remove(file.c_str());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("generated: " + join(want) + "\n"), std::string::npos) << r.output;
  EXPECT_EQ(run("--model x --prompt-ids @/nonexistent/ids").exit_code, 2);
}

// --parallel N: N sequences through the engine at once, prompts taken in turn; each sequence's
// greedy tokens are still Hugging Face's.
TEST(VlmGenerate, ParallelSequencesPrintHuggingFaceGreedyTokens) {
  const std::string model = "llama_tiny";
  Reference ref = load_reference(model);
  const Result r = run("--model " + fixture_model_dir(model) + " --prompt-ids " + join(ref.ids(2)) +
                       " --prompt-ids " + join(ref.ids(3)) + " --parallel 3 --max-tokens 16 --ignore-eos " +
                       "--chunk-size 32 --no-logprobs --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> want = ref.greedy(i % 2 == 0 ? 2 : 3);
    want.resize(16);
    EXPECT_NE(r.output.find("[" + std::to_string(i) + "] generated: " + join(want) + "\n"), std::string::npos)
        << r.output;
  }
  EXPECT_NE(r.output.find("decode steps (no prefill): "), std::string::npos) << r.output;
}

// Seeded sampling: sequence i of --parallel uses seed + i, so sequence 1 of a run with seed 5
// equals a single run with seed 6.
TEST(VlmGenerate, ParallelSeedsAreSeedPlusIndex) {
  const std::string model = "qwen2_tiny";
  const std::string base = "--model " + fixture_model_dir(model) + " --prompt-ids " +
                           join(load_reference(model).ids(1)) + " --max-tokens 12 --ignore-eos --temperature 1 ";
  const Result both = run(base + "--parallel 2 --seed 5");
  const Result single = run(base + "--seed 6");
  ASSERT_EQ(both.exit_code, 0) << both.output;
  ASSERT_EQ(single.exit_code, 0) << single.output;
  const size_t at = single.output.find("generated: ");
  ASSERT_NE(at, std::string::npos);
  const std::string line = single.output.substr(at, single.output.find('\n', at) - at);
  EXPECT_NE(both.output.find("[1] " + line), std::string::npos) << both.output << "\n" << line;
  EXPECT_EQ(both.output.find("[0] " + line), std::string::npos) << "seed 5 should differ";
}

TEST(VlmGenerate, BadArgumentsAreUsageErrors) {
  Result r = run("--prompt-ids 1,2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--model is required"), std::string::npos) << r.output;
  r = run("--model x --prompt-ids 1,,2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--prompt-ids needs an integer"), std::string::npos) << r.output;
  r = run("--model " + fixture_model_dir("qwen2_tiny") + " --prompt-ids 1,99999");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("prompt id 99999 >= vocab size 384"), std::string::npos) << r.output;
  r = run("--model " + fixture_model_dir("qwen2_tiny") + " --prompt-ids 1,2 --device tpu");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--device must be auto, cuda or cpu"), std::string::npos) << r.output;
  r = run("--model " + fixture_model_dir("qwen2_tiny") + " --prompt-ids 1,2 --dtype double");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--dtype must be auto, bfloat16, float16 or float32"), std::string::npos) << r.output;
}

// --device cpu (and --dtype auto) run on the CPU backend whatever the build has.
TEST(VlmGenerate, DeviceCpuRunsTheCpuBackend) {
  const Result r = run("--model " + fixture_model_dir("qwen2_tiny") + " --prompt-ids 1,2,3 --device cpu --dtype auto");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// The KV cache's dtype: auto follows --dtype (f32 on the exact path, bf16 otherwise), as the
// server's; --kv-dtype stays an alias of --kv-cache-dtype. Read from the engine's start line.
TEST(VlmGenerate, KvCacheDtypeFollowsTheDtype) {
  const std::string base = "--model " + fixture_model_dir("qwen2_tiny") + " --prompt-ids 1,2,3 --max-tokens 2 --log-level info";
  const auto kv_line = [](const std::string& out) {
    const size_t at = out.find("engine: KV cache");
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
  };
  Result r = run(base);  // --dtype float32 (run's default here)
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(kv_line(r.output).find("MiB F32)"), std::string::npos) << r.output;
  r = run(base + " --dtype bfloat16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(kv_line(r.output).find("MiB BF16)"), std::string::npos) << r.output;
  r = run(base + " --kv-dtype bf16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(kv_line(r.output).find("MiB BF16)"), std::string::npos) << r.output;
  r = run(base + " --kv-dtype bf16 --kv-cache-dtype f32");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("give --kv-cache-dtype once"), std::string::npos) << r.output;
}

// --load-format dummy: a directory with config.json alone generates, the same tokens twice; auto
// still wants the safetensors.
TEST(VlmGenerate, LoadFormatDummyNeedsOnlyTheConfig) {
  const std::string dir = ::testing::TempDir() + "vlm_generate_dummy_" + std::to_string(::getpid());
  ASSERT_EQ(run_command("mkdir -p " + dir + " && cp " + fixture_model_dir("qwen2_tiny") + "/config.json " + dir).exit_code,
            0);
  const std::string args = "--model " + dir + " --device cpu --prompt-ids 1,2,3,4 --max-tokens 6 --ignore-eos --threads 2";
  const Result a = run(args + " --load-format dummy"), b = run(args + " --load-format dummy");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const size_t at = a.output.find("generated: ");
  ASSERT_NE(at, std::string::npos) << a.output;
  const std::string tokens = a.output.substr(at, a.output.find('\n', at) - at);
  EXPECT_NE(b.output.find(tokens + "\n"), std::string::npos) << b.output;
  const Result none = run(args);
  EXPECT_EQ(none.exit_code, 1) << none.output;
  EXPECT_NE(none.output.find("no model.safetensors"), std::string::npos) << none.output;
  EXPECT_EQ(run(args + " --load-format pt").exit_code, 2);
  run_command("rm -rf " + dir);
}

TEST(VlmGenerate, MissingModelIsALoadError) {
  const Result r = run("--model /nonexistent/dir --prompt-ids 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("/nonexistent/dir/config.json: cannot open"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace vlm::testing

namespace vlm::testing {
namespace {

// --prompt tokenizes with the model's tokenizer (and --chat renders the chat template first):
// the same tokens as the equivalent --prompt-ids.
TEST(VlmGenerate, TextPromptsMatchTheirTokenIds) {
  const std::string dir = demo_model_dir();
  auto tok = Tokenizer::load(dir);
  const Result by_text = run("--model " + dir + " --prompt 'Hello there' --max-tokens 6 --ignore-eos --no-logprobs");
  ASSERT_EQ(by_text.exit_code, 0) << by_text.output;
  const Result by_ids = run("--model " + dir + " --prompt-ids " + join(tok->encode("Hello there")) +
                            " --max-tokens 6 --ignore-eos --no-logprobs");
  ASSERT_EQ(by_ids.exit_code, 0) << by_ids.output;
  const auto generated = [](const std::string& s) { return s.substr(s.find("generated: "), s.find('\n', s.find("generated: ")) - s.find("generated: ")); };
  EXPECT_EQ(generated(by_text.output), generated(by_ids.output));
  EXPECT_NE(by_text.output.find("text: \""), std::string::npos) << by_text.output;
  auto tmpl = ChatTemplate::load(dir);
  ASSERT_TRUE(tmpl.has_value());
  const std::string rendered = tmpl->render(nlohmann::json::array({{{"role", "user"}, {"content", "Hi"}}}),
                                            {{"add_generation_prompt", true}, {"bos_token", ""}, {"eos_token", tok->eos_token()}});
  const Result chat = run("--model " + dir + " --prompt Hi --chat --max-tokens 3 --ignore-eos --no-logprobs");
  const Result chat_ids = run("--model " + dir + " --prompt-ids " + join(tok->encode(rendered, false)) +
                              " --max-tokens 3 --ignore-eos --no-logprobs");
  ASSERT_EQ(chat.exit_code, 0) << chat.output;
  EXPECT_EQ(generated(chat.output), generated(chat_ids.output));
  EXPECT_EQ(run("--model " + dir + " --prompt-ids 1 --chat").exit_code, 2);
}

}  // namespace
}  // namespace vlm::testing

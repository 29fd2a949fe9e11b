// vlm-search-patterns on the demo model (a tiny random Qwen2): it runs, writes a per-head file
// the loader reads back, and that file drives the server: greedy tokens through the server equal
// the in-process decoder run with the same per-head plans, and an all-dense file (target error
// 0) gives exactly the dense server's tokens.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/backends/make_step_backend.h"
#include "engine/scheduling/kv_cache.h"
#include "model/decoder/llm_decoder.h"
#include "model/methods/sparse_patterns_file.h"
#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

using nlohmann::json;

int run(const std::string& cmd) { return std::system((cmd + " > /tmp/vlm_search_patterns_test.log 2>&1").c_str()); }

std::string search(const std::string& out, double target) {
  const std::string cmd = std::string(VLM_BIN_DIR) + "/vlm-search-patterns --model " + demo_model_dir() +
                          " --out " + out + " --length 384 --block 16 --video 40:256 --threads 2 --target-error " +
                          std::to_string(target);
  EXPECT_EQ(run(cmd), 0) << cmd;
  return out;
}

// Greedy tokens in-process: the decoder alone, prefill in one chunk with `sparse` (if any).
std::vector<int32_t> local_greedy(const std::vector<int32_t>& prompt, int n, const SparsePrefillConfig* sparse) {
  auto decoder = LlmDecoder::load(demo_model_dir());
  const ModelConfig& c = decoder->config();
  KVCache cache({c.num_layers, 64, 16, static_cast<int>(c.num_kv_heads), static_cast<int>(c.head_dim), DType::F32});
  std::vector<int32_t> blocks(64);
  for (int i = 0; i < 64; ++i) blocks[i] = i;
  std::vector<int32_t> tokens = prompt, out;
  int32_t cached = 0;
  std::vector<float> logits;
  while (static_cast<int>(out.size()) < n) {
    const auto len = static_cast<int32_t>(tokens.size()) - cached;
    SequenceChunk ch;
    ch.token_ids = std::span<const int32_t>(tokens).subspan(cached, len);
    ch.start_pos = cached;
    ch.block_table = blocks;
    ForwardBatch fb = make_forward_batch({&ch, 1}, 16);
    if (sparse && len > 1) {
      fb.sparse_prefill = {*sparse};
      fb.prompt_lens = {static_cast<int32_t>(prompt.size())};
    }
    decoder->forward(fb, cache.layers(), logits);
    cached += len;
    const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
    out.push_back(static_cast<int32_t>(best));
    tokens.push_back(static_cast<int32_t>(best));
  }
  return out;
}

std::vector<int32_t> server_greedy(const std::vector<std::string>& extra, const std::vector<int32_t>& prompt, int n) {
  std::vector<std::string> args = {"--model", demo_model_dir(), "--kv-cache-dtype", "f32", "--num-kv-blocks", "256",
                                   "--max-model-len", "1024", "--threads", "2", "--log-level", "warn"};
  args.insert(args.end(), extra.begin(), extra.end());
  ServerProcess server(std::string(VLM_BIN_DIR) + "/vlm-server", args);
  const json body = {{"prompt", prompt}, {"max_tokens", n}, {"temperature", 0}, {"ignore_eos", true},
                     {"return_token_ids", true}};
  const HttpResult r = http_request("POST", server.base_url() + "/v1/completions", body.dump());
  EXPECT_EQ(r.status, 200) << r.body << server.log();
  if (r.status != 200) return {};
  return json::parse(r.body)["choices"][0]["token_ids"].get<std::vector<int32_t>>();
}

TEST(SearchPatterns, FileLoadsAndDrivesTheServer) {
  const std::string tmp = ::testing::TempDir() + "vlm_search_patterns_" + std::to_string(::getpid());
  const std::string searched = search(tmp + "_searched.json", 0.6);
  const std::string all_dense = search(tmp + "_dense.json", 0.0);
  auto decoder = LlmDecoder::load(demo_model_dir());
  const auto& c = decoder->config();
  const SparseHeadPatterns pats = load_sparse_patterns(searched), dense = load_sparse_patterns(all_dense);
  ASSERT_EQ(static_cast<int64_t>(pats.layers.size()), c.num_layers);
  int sparse_heads = 0;
  for (const auto& l : pats.layers) {
    ASSERT_EQ(static_cast<int64_t>(l.size()), c.num_heads);
    for (const auto& h : l) sparse_heads += h.type != HeadPatternType::Dense;
  }
  EXPECT_GT(sparse_heads, 0);  // random weights attend almost uniformly: only a loose budget (0.6) admits sparse heads
  for (const auto& l : dense.layers)
    for (const auto& h : l) EXPECT_EQ(h.type, HeadPatternType::Dense);

  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> u(0, static_cast<int32_t>(c.vocab_size) - 1);
  std::vector<int32_t> prompt(300);
  for (auto& t : prompt) t = u(rng);
  const int n = 6;
  SparsePrefillConfig cfg;
  cfg.method = SparsePrefillMethod::MMInference;
  cfg.head_patterns = std::make_shared<const SparseHeadPatterns>(pats);
  const auto local_sparse = local_greedy(prompt, n, &cfg);
  const std::vector<std::string> sparse_flags = {"--sparse-prefill-config", searched, "--sparse-prefill-min-len", "1"};
  EXPECT_EQ(server_greedy(sparse_flags, prompt, n), local_sparse);

  const auto dense_server = server_greedy({}, prompt, n);
  EXPECT_EQ(dense_server, local_greedy(prompt, n, nullptr));
  EXPECT_EQ(server_greedy({"--sparse-prefill-config", all_dense, "--sparse-prefill-min-len", "1"}, prompt, n),
            dense_server);
  // Prompts shorter than --sparse-prefill-min-len (default 4096) stay on the exact path.
  EXPECT_EQ(server_greedy({"--sparse-prefill-config", searched}, prompt, n), dense_server);
  std::remove(searched.c_str());
  std::remove(all_dense.c_str());
}

// --device cuda where no GPU is visible (or the build has no CUDA backend): exit 1 with a message
// naming the flag and the reason, and no file written. Skips where a GPU is visible (test_cuda's
// PatternSearch tests run the GPU search there).
TEST(SearchPatterns, DeviceCudaWithoutGpuFailsClearly) {
  std::string why;
  if (cuda_available(&why)) GTEST_SKIP() << "a GPU is visible: the GPU search runs in test_cuda";
  const std::string out = ::testing::TempDir() + "vlm_search_patterns_nogpu_" + std::to_string(::getpid()) + ".json";
  const std::string log = out + ".log";
  const std::string cmd = std::string(VLM_BIN_DIR) + "/vlm-search-patterns --model " + demo_model_dir() + " --out " +
                          out + " --length 128 --device cuda > " + log + " 2>&1";
  const int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  EXPECT_EQ(WEXITSTATUS(rc), 1) << cmd;
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("error: --device cuda: " + why), std::string::npos) << text;
  EXPECT_FALSE(std::ifstream(out).good());
  std::remove(log.c_str());
}

TEST(SearchPatterns, LoaderReadsMInferenceListsAndRejectsBadFiles) {
  const std::string p = "/tmp/vlm_search_patterns_minference.json";
  std::ofstream(p) << R"([{"0": ["vertical_and_slash", 30, 800, 0.9], "1": ["stream_llm", 100, 800, 0.8]}])";
  const auto pats = load_sparse_patterns(p);
  ASSERT_EQ(pats.layers.size(), 1u);
  EXPECT_EQ(pats.layers[0][0].type, HeadPatternType::VerticalSlash);
  EXPECT_EQ(pats.layers[0][0].slash_size, 800);
  EXPECT_EQ(pats.layers[0][1].type, HeadPatternType::AShape);
  EXPECT_EQ(pats.layers[0][1].n_local, 800);
  std::ofstream(p) << R"({"version": 1, "layers": [{"0": {"boundary": "2d", "pattern": ["grid", 2, 512], "stride": 256}}]})";
  const auto g = load_sparse_patterns(p);
  EXPECT_EQ(g.layers[0][0].boundary, BoundaryKind::TwoD);
  EXPECT_EQ(g.layers[0][0].grid.stride, 256);
  EXPECT_EQ(g.layers[0][0].grid.band, 2);
  std::ofstream(p) << R"({"version": 1, "layers": [{"0": {"pattern": ["magic"]}}]})";
  EXPECT_THROW(load_sparse_patterns(p), LoadError);
  std::ofstream(p) << R"({"version": 1, "layers": [{"1": {"pattern": ["dense"]}}]})";
  EXPECT_THROW(load_sparse_patterns(p), LoadError);  // head 0 missing
}

}  // namespace
}  // namespace vlm::testing

// vlm-bench as a user runs it, against a fake OpenAI-compatible server on 127.0.0.1 (the real
// vlm-server comes later): every workload and arrival mode completes with the server's token
// counts and ordered percentiles; failures are counted by status; every run ends within its limits.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>
#include <fstream>
#include <iterator>

#include "server/http/base64.h"
#include "tests/support/server_process.h"
#include "tests/tools/fake_openai_server.h"
#include "tools/vlm-bench/png_encoder.h"

namespace vlm::testing {
namespace {

using nlohmann::json;

struct BenchRun {
  int exit_code;
  std::string output;  // stdout and stderr
  json result;         // the --result-json file (null if absent)
  double seconds;
};

std::string temp_path(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / ("vlm_bench_" + name)).string();
}

BenchRun run_bench(const std::string& args, const std::string& name) {
  const std::string json_path = temp_path(name + ".json");
  std::filesystem::remove(json_path);
  const std::string cmd = std::string(VLM_BIN_DIR) + "/vlm-bench --no-progress --result-json " + json_path + " " + args + " 2>&1";
  const auto t0 = std::chrono::steady_clock::now();
  CommandResult c = run_command(cmd);
  BenchRun r{c.exit_code, std::move(c.output), nullptr,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
  std::ifstream f(json_path);
  if (f) r.result = json::parse(f);
  return r;
}

// The checks every clean run must pass. output_len < 0: lengths vary (checked by the caller).
void expect_clean(const BenchRun& r, int num_prompts, int output_len) {
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(r.result.is_object()) << r.output;
  const json& j = r.result;
  EXPECT_EQ(j["completed"], num_prompts) << r.output;
  EXPECT_EQ(j["failed"], 0) << r.output;
  if (output_len >= 0) {
    EXPECT_EQ(j["total_output_tokens"], static_cast<long long>(num_prompts) * output_len);
  }
  EXPECT_EQ(j["stream_checks"]["usage_missing"], 0);
  EXPECT_EQ(j["requests"].size(), static_cast<size_t>(num_prompts));
  for (const json& q : j["requests"]) {
    EXPECT_TRUE(q["success"].get<bool>()) << q["error"];
    EXPECT_LE(q["ttft_s"].get<double>(), q["e2el_s"].get<double>() + 1e-12);
    EXPECT_GT(q["ttft_s"].get<double>(), 0.0);
    if (output_len >= 0) {
      EXPECT_EQ(q["output_tokens"], output_len);
    }
    EXPECT_TRUE(q["usage_seen"].get<bool>());
  }
  for (const char* m : {"ttft", "tpot", "itl", "e2el"}) {
    const std::string k = m;
    EXPECT_LE(j["min_" + k + "_ms"].get<double>(), j["p50_" + k + "_ms"].get<double>() + 1e-9) << k;
    EXPECT_LE(j["p50_" + k + "_ms"].get<double>(), j["p90_" + k + "_ms"].get<double>() + 1e-9) << k;
    EXPECT_LE(j["p90_" + k + "_ms"].get<double>(), j["p99_" + k + "_ms"].get<double>() + 1e-9) << k;
    EXPECT_LE(j["p99_" + k + "_ms"].get<double>(), j["max_" + k + "_ms"].get<double>() + 1e-9) << k;
  }
  EXPECT_LE(j["mean_ttft_ms"].get<double>(), j["mean_e2el_ms"].get<double>());
  EXPECT_GT(j["request_throughput"].get<double>(), 0.0);
  EXPECT_NE(r.output.find("Serving Benchmark Result"), std::string::npos);
}

TEST(VlmBench, RandomChatAllAtOnce) {
  FakeOpenAiServer server;
  const BenchRun r = run_bench("--base-url " + server.base_url() + " --num-prompts 40 --input-len 32 --output-len 8 "
                          "--api-key sk-test --goodput ttft:60000 tpot:60000 --plot " + temp_path("plot.svg"), "chat");
  expect_clean(r, 40, 8);
  const json& j = r.result;
  EXPECT_EQ(j["model_id"], "fake-model");  // from /v1/models
  EXPECT_EQ(j["prompt_calibration"], "matched via /tokenize");
  EXPECT_EQ(j["stream_checks"]["chunk_count_mismatch"], 0);
  EXPECT_EQ(j["stream_checks"]["role_chunk_anomalies"], 0);
  EXPECT_EQ(j["stream_checks"]["done_missing"], 0);
  EXPECT_DOUBLE_EQ(j["request_goodput"].get<double>(), j["request_throughput"].get<double>());
  EXPECT_GT(j["max_concurrent_requests"].get<int>(), 1);
  for (const json& q : j["requests"]) {
    EXPECT_NEAR(q["prompt_tokens"].get<int>(), 32, 2);  // calibrated against the fake tokenizer
    EXPECT_EQ(q["itl_s"].size(), 8u);                   // role chunk, then 8 token chunks
  }
  const std::vector<std::string> bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 40u);
  const json b = json::parse(bodies[0]);
  EXPECT_EQ(b["model"], "fake-model");
  EXPECT_EQ(b["stream"], true);
  EXPECT_EQ(b["stream_options"]["include_usage"], true);
  EXPECT_EQ(b["ignore_eos"], true);
  EXPECT_EQ(b["max_tokens"], 8);
  EXPECT_EQ(server.auth_headers()[0], "Bearer sk-test");
  std::ifstream svg(temp_path("plot.svg"));
  std::string text((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.rfind("<svg", 0), 0u);
  EXPECT_NE(text.find("TTFT CDF"), std::string::npos);
  EXPECT_NE(text.find("<polyline"), std::string::npos);
  EXPECT_NE(text.find("</svg>"), std::string::npos);
}

TEST(VlmBench, HundredsOfConcurrentStreams) {
  FakeOpenAiServer server([](int) { FakeBehaviour b; b.first_token_ms = 200; b.token_gap_ms = 20; return b; });
  const BenchRun r = run_bench("--base-url " + server.base_url() + " --num-prompts 300 --input-len 8 --output-len 4", "many");
  expect_clean(r, 300, 4);
  EXPECT_GE(r.result["max_concurrent_requests"].get<int>(), 200);
  // Chunks sent at least 20 ms apart are never timed as closer (no upper bound: a loaded machine
  // delays them, and tests assert no timings).
  EXPECT_GT(r.result["median_itl_ms"].get<double>(), 15.0);
}

TEST(VlmBench, CompletionsTokenIdsPoissonRate) {
  FakeOpenAiServer server;
  const BenchRun r = run_bench("--base-url " + server.base_url() + " --endpoint completions --prompt-ids --num-prompts 30 "
                          "--input-len 40 --range-ratio 0.5 --output-len 5 --request-rate 100 --seed 3", "ids");
  expect_clean(r, 30, -1);
  const std::vector<std::string> bodies = server.bodies();
  std::multiset<int> sent, reported, asked, generated;
  for (const std::string& body : bodies) {
    const json b = json::parse(body);
    ASSERT_TRUE(b["prompt"].is_array());
    const int n = static_cast<int>(b["prompt"].size());
    EXPECT_GE(n, 20);
    EXPECT_LE(n, 60);
    sent.insert(n);
    asked.insert(b["max_tokens"].get<int>());
  }
  double last_start = 0;
  for (const json& q : r.result["requests"]) {
    reported.insert(q["prompt_tokens"].get<int>());
    generated.insert(q["output_tokens"].get<int>());
    last_start = std::max(last_start, q["scheduled_s"].get<double>());
  }
  EXPECT_EQ(sent, reported);  // exact prompt lengths, equal to the server's usage
  EXPECT_EQ(asked, generated);
  EXPECT_GT(asked.size(), 1u);
  EXPECT_GE(*asked.begin(), 2);  // output lengths vary in [5 * 0.5, 5 * 1.5]
  EXPECT_LE(*asked.rbegin(), 8);
  EXPECT_NEAR(last_start, 30 / 100.0, 1e-6);  // the schedule ends at N / rate
  EXPECT_GE(r.result["duration"].get<double>(), 0.25);
}

TEST(VlmBench, RandomMmBurstyWithConcurrencyCap) {
  FakeOpenAiServer server;
  const BenchRun r = run_bench("--base-url " + server.base_url() + " --dataset random-mm --images-per-request 2 "
                          "--video-frames 2 --image-size 64x48 --num-prompts 12 --input-len 16 --output-len 4 "
                          "--request-rate 200 --burstiness 0.5 --max-concurrency 3", "mm");
  expect_clean(r, 12, 4);
  EXPECT_LE(r.result["max_concurrent_requests"].get<int>(), 3);
  for (const std::string& body : server.bodies()) {
    const json content = json::parse(body)["messages"][0]["content"];
    ASSERT_EQ(content.size(), 5u);  // text + 2 images + 2 frames
    for (size_t i = 1; i < content.size(); ++i) {
      const std::string url = content[i]["image_url"]["url"];
      ASSERT_EQ(url.rfind("data:image/png;base64,", 0), 0u);
      const auto png = base64_decode(url.substr(22));
      ASSERT_TRUE(png);
      EXPECT_EQ(png->substr(1, 3), "PNG");
      EXPECT_EQ(static_cast<uint8_t>((*png)[19]), 64);
      EXPECT_EQ(static_cast<uint8_t>((*png)[23]), 48);
    }
  }
  for (const json& q : r.result["requests"])  // text tokens + 4 images
    EXPECT_NEAR(q["prompt_tokens"].get<int>(), 16 + 4 * FakeOpenAiServer::kImageTokens, 2);
}

// Multi-turn: 5 conversations x 3 turns sent in waves; every turn resends the history with the
// server's own answers, the image only in turn 1; the report has TTFT by turn (the fake server
// has no prefix-cache counters, which the report says).
TEST(VlmBench, MultiTurnResendsHistoryWithTheServersAnswers) {
  FakeOpenAiServer server;
  const BenchRun r = run_bench("--base-url " + server.base_url() + " --dataset multi-turn --num-prompts 5 "
                          "--num-turns 3 --input-len 40 --turn-len 8 --output-len 4 --image-size 32 --max-concurrency 2",
                          "multi_turn");
  expect_clean(r, 15, 4);
  const std::vector<std::string> bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 15u);
  for (size_t i = 0; i < bodies.size(); ++i) {
    const json m = json::parse(bodies[i])["messages"];
    const size_t turn = i / 5 + 1;  // waves: all of turn 1 before any of turn 2
    ASSERT_EQ(m.size(), 2 * turn - 1) << bodies[i];
    EXPECT_EQ(m[0]["content"][0]["type"], "image_url");
    for (size_t k = 1; k < m.size(); ++k) {
      EXPECT_EQ(m[k]["role"], k % 2 ? "assistant" : "user");
      EXPECT_TRUE(m[k]["content"].is_string()) << "no image after turn 1";
    }
    if (turn > 1) {  // the history is one previous-turn body (of this wave's 5, in any arrival order)
      const size_t n = 2 * (turn - 1) - 1;  // plus the answer it got
      const json head(std::vector<json>(m.begin(), m.begin() + static_cast<long>(n)));
      bool found = false;
      for (size_t j = (turn - 2) * 5; j < (turn - 1) * 5; ++j) found |= json::parse(bodies[j])["messages"] == head;
      EXPECT_TRUE(found) << "turn " << turn << " does not resend a previous turn: " << bodies[i];
      EXPECT_FALSE(m[n]["content"].get<std::string>().empty());
    }
  }
  EXPECT_NE(r.output.find("Multi-turn (TTFT by turn)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exports no vllm:prefix_cache_* counters"), std::string::npos) << r.output;
}

// --image-file: turn 1 of each conversation carries a real image file's bytes (round robin over
// the files), which every later turn resends unchanged with the history.
TEST(VlmBench, MultiTurnSendsImageFilesInTurnOne) {
  FakeOpenAiServer server;
  const std::string media = std::string(VLM_FIXTURES_DIR) + "/qwen2vl_server/media/";
  const std::vector<std::string> files = {media + "wide.png", media + "tall.png"};
  std::vector<std::string> urls;
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    ASSERT_TRUE(in) << f;
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    urls.push_back("data:image/png;base64," + base64_encode(bytes));
  }
  const BenchRun r = run_bench("--base-url " + server.base_url() + " --dataset multi-turn --num-prompts 3 "
                               "--num-turns 2 --input-len 20 --turn-len 8 --output-len 3 --max-concurrency 1 "
                               "--image-file " + files[0] + " --image-file " + files[1], "multi_turn_files");
  expect_clean(r, 6, 3);
  const std::vector<std::string> bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 6u);
  std::multiset<std::string> turn1, turn2;
  for (size_t i = 0; i < bodies.size(); ++i) {
    const json m = json::parse(bodies[i])["messages"];
    ASSERT_EQ(m[0]["content"][0]["type"], "image_url") << bodies[i].substr(0, 200);
    (i < 3 ? turn1 : turn2).insert(m[0]["content"][0]["image_url"]["url"].get<std::string>());
  }
  // Conversations 0 and 2 get the first file, conversation 1 the second; turn 2 resends them.
  EXPECT_EQ(turn1, (std::multiset<std::string>{urls[0], urls[1], urls[0]}));
  EXPECT_EQ(turn2, turn1);
}

TEST(VlmBench, JsonlWithImagePathsWithoutStreaming) {
  FakeOpenAiServer server;
  const std::string dir = temp_path("jsonl_dir");
  std::filesystem::create_directories(dir);
  {
    std::ofstream png(dir + "/cat.png", std::ios::binary);
    png << bench::encode_png_rgb(bench::random_image_rgb(8, 8, 1), 8, 8);
    std::ofstream f(dir + "/reqs.jsonl");
    f << R"({"messages":[{"role":"user","content":[{"type":"text","text":"what is this"},{"type":"image_url","image_url":{"url":"cat.png"}}]}],"max_tokens":3})" "\n";
    f << R"([{"role":"user","content":"hello there"}])" "\n";
    f << "\n";
    f << R"({"prompt":"describe","images":["cat.png","https://example.com/dog.jpg"],"max_tokens":3})" "\n";
  }
  const BenchRun r = run_bench("--base-url " + server.base_url() + " --dataset jsonl --dataset-path " + dir +
                          "/reqs.jsonl --num-prompts 6 --output-len 3 --no-stream --warmup 2", "jsonl");
  expect_clean(r, 6, 3);
  const std::vector<std::string> bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 8u);  // 2 warmup + 6, cycling over the 3 lines
  // Requests go out together, so arrival order is not line order: classify the bodies by shape.
  int local_images = 0, remote_images = 0, plain = 0;
  for (const std::string& body : bodies) {
    const json b = json::parse(body);
    EXPECT_EQ(b["stream"], false);
    EXPECT_FALSE(b.contains("stream_options"));
    const json& content = b["messages"][0]["content"];
    if (content.is_string()) {
      ++plain;
      continue;
    }
    for (const json& part : content) {
      if (part["type"] != "image_url") continue;
      const std::string url = part["image_url"]["url"];
      if (url.rfind("data:image/png;base64,", 0) == 0) ++local_images;
      else if (url == "https://example.com/dog.jpg") ++remote_images;
      else ADD_FAILURE() << "unexpected image url " << url.substr(0, 80);
    }
  }
  EXPECT_EQ(plain, 3);          // line 2, sent three times (one warmup)
  EXPECT_EQ(local_images, 5);   // lines 1 and 3 hold cat.png: sent 3 and 2 times (2 warmups)
  EXPECT_EQ(remote_images, 2);  // line 3, twice
  for (const json& q : r.result["requests"]) EXPECT_DOUBLE_EQ(q["ttft_s"].get<double>(), q["e2el_s"].get<double>());
}

TEST(VlmBench, FailuresCountedByStatusAndRunFinishes) {
  // Of every six requests: a 500, a 429, one that stalls past the request timeout, one that
  // breaks mid-stream, two that succeed.
  FakeOpenAiServer server([](int n) {
    FakeBehaviour b;
    switch (n % 6) {
      case 1: b.status = 500; break;
      case 2: b.status = 429; break;
      case 3: b.first_token_ms = 5000; break;
      case 4: b.error_mid_stream = true; break;
      default: break;
    }
    return b;
  });
  const BenchRun r = run_bench("--base-url " + server.base_url() + " --num-prompts 12 --input-len 8 --output-len 4 "
                          "--max-concurrency 1 --request-timeout 0.4", "fail");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json& j = r.result;
  EXPECT_EQ(j["completed"], 4);
  EXPECT_EQ(j["failed"], 8);
  EXPECT_EQ(j["failures_by_status"]["500"], 2);
  EXPECT_EQ(j["failures_by_status"]["429"], 2);
  EXPECT_EQ(j["failures_by_status"]["timeout"], 2);
  EXPECT_EQ(j["failures_by_status"]["stream_error"], 2);
  EXPECT_EQ(j["total_output_tokens"], 16);
  EXPECT_NE(r.output.find("First errors:"), std::string::npos);
  EXPECT_NE(r.output.find("queue full"), std::string::npos);
  EXPECT_LT(r.seconds, 5.0);

  // The whole run's --timeout: everything stalls, nothing may outlive 1 s by much.
  FakeOpenAiServer stuck([](int) { FakeBehaviour b; b.first_token_ms = 60000; return b; });
  const BenchRun s = run_bench("--base-url " + stuck.base_url() + " --num-prompts 50 --input-len 8 --output-len 4 "
                          "--max-concurrency 10 --timeout 1", "stuck");
  ASSERT_EQ(s.exit_code, 0) << s.output;
  EXPECT_EQ(s.result["completed"], 0);
  EXPECT_EQ(s.result["failures_by_status"]["run_timeout"], 10);
  EXPECT_EQ(s.result["failures_by_status"]["not_sent"], 40);
  EXPECT_TRUE(s.result["hit_deadline"].get<bool>());
  EXPECT_LT(s.seconds, 4.0);
}

TEST(VlmBench, RefusesRemoteTargetsAndBadFlags) {
  BenchRun r = run_bench("--base-url http://192.0.2.1:8000", "remote");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--allow-remote"), std::string::npos) << r.output;
  r = run_bench("--max-concurrency 0", "flags");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--max-concurrency needs an integer >= 1"), std::string::npos) << r.output;
  r = run_bench("--base-url http://127.0.0.1:1 --num-prompts 1", "down");  // nothing listens
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("/v1/models"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace vlm::testing

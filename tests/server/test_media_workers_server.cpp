// Media work off the HTTP threads (server/media_workers.h) in a real vlm-server on 127.0.0.1:
// while a long video (made here with Debian's ffmpeg CLI: 400 s, 4 fps, 1,600 frames) is being
// decoded on the only media worker, a text request is answered; with that worker busy and its
// one queue slot taken, a third video request gets the 503 envelope with Retry-After at once.
// Every wait is a bounded loop on /metrics (vlm:media_jobs_running / _waiting); no timed
// assertions: the checks are orderings (the text answer arrives before the video's).
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/support/qwen2vl_chat_cases.h"
#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

struct LongVideo {
  std::string dir, path;
  LongVideo() : dir("/tmp/vlm_media_workers_" + std::to_string(getpid())), path(dir + "/long.mp4") {
    fs::create_directories(dir);
    const CommandResult r = run_command(
        "ffmpeg -hide_banner -loglevel error -y -f lavfi -i testsrc2=size=448x448:rate=4:duration=400 "
        "-c:v libx264 -preset veryfast -pix_fmt yuv420p " + path + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
  ~LongVideo() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

std::string video_body(const std::string& path) {
  const ordered_json content = ordered_json::array(
      {{{"type", "video"}, {"video", "file://" + path}}, {{"type", "text"}, {"text", "What moves?"}}});
  return ordered_json{{"messages", ordered_json::array({{{"role", "user"}, {"content", content}}})},
                      {"max_tokens", 2}, {"temperature", 0}}
      .dump();
}

// Polls `name` on /metrics until it equals `want` (at most ~60 s); returns whether it did.
bool wait_metric(const ServerProcess& s, const std::string& name, double want) {
  for (int i = 0; i < 1200; ++i) {
    if (s.metric(name) == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

struct Pending {
  std::atomic<bool> done{false};
  HttpResult result;
  std::thread thread;
  Pending(const std::string& url, const std::string& body) {
    thread = std::thread([this, url, body] {
      result = http_request("POST", url, body, {"Content-Type: application/json"}, 300000);
      done = true;
    });
  }
  ~Pending() {
    if (thread.joinable()) thread.join();
  }
};

TEST(MediaWorkersServer, TextIsAnsweredWhileAVideoDecodesAndAFullQueueIs503) {
  if (run_command("command -v ffmpeg").exit_code != 0) GTEST_SKIP() << "no ffmpeg CLI";
  const LongVideo video;
  // Every frame sampled up to 768 (fps 2): the whole 400 s file is decoded and preprocessed;
  // the prompt is then longer than --max-model-len (a 400 after the media work: fine here).
  ServerProcess s(std::string(VLM_BIN_DIR) + "/vlm-server",
                  {"--model", qwen2vl_chat_model_dir("qwen2_vl_chat"), "--served-model-name", "qwen", "--kv-cache-dtype",
                   "f32", "--num-kv-blocks", "64", "--max-model-len", "512", "--threads", "1", "--log-level", "warn",
                   "--max-video-frames", "768", "--allowed-local-media-path", video.dir, "--media-workers", "1",
                   "--media-queue", "1"});
  const std::string url = s.base_url() + "/v1/chat/completions";
  ASSERT_EQ(s.metric("vlm:media_jobs_running"), 0);

  Pending a(url, video_body(video.path));
  ASSERT_TRUE(wait_metric(s, "vlm:media_jobs_running", 1));
  // A text request while the video is on the media worker: answered, and before the video.
  const ordered_json text{{"messages", ordered_json::array({{{"role", "user"}, {"content", "Hello"}}})},
                          {"max_tokens", 2}, {"temperature", 0}};
  const HttpResult t = http_request("POST", url, text.dump());
  EXPECT_EQ(t.status, 200) << t.body;
  EXPECT_FALSE(a.done) << "the video finished before the text request: make the video longer";

  // The worker busy, one request waiting: the next one is refused at once with the envelope.
  Pending b(url, video_body(video.path));
  ASSERT_TRUE(wait_metric(s, "vlm:media_jobs_waiting", 1));
  const HttpResult c = http_request("POST", url, video_body(video.path));
  EXPECT_FALSE(a.done);
  EXPECT_EQ(c.status, 503) << c.body;
  const json err = json::parse(c.body);
  EXPECT_EQ(err["error"]["type"], "unavailable_error");
  EXPECT_NE(err["error"]["message"].get<std::string>().find("media workers are busy"), std::string::npos);
  EXPECT_NE(c.headers.find("Retry-After: 5"), std::string::npos) << c.headers;

  a.thread.join();
  b.thread.join();
  // Both ran to the end of their media work; the prompt is then too long for --max-model-len.
  for (const HttpResult* r : {&a.result, &b.result}) {
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_NE(r->body.find("your prompt has 24600 tokens"), std::string::npos) << r->body;  // 768 frames
  }
  EXPECT_EQ(s.metric("vlm:media_jobs_rejected_total"), 1);
  EXPECT_TRUE(wait_metric(s, "vlm:media_jobs_running", 0));
}

}  // namespace
}  // namespace vlm::testing

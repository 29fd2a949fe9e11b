// vlm-server taking video files in video_url (tests/fixtures/video): the Qwen2-VL and Qwen2.5-VL
// chat fixtures answer a video-file prompt with transformers 5.17's greedy tokens and their
// log-probabilities (exact path, f32 KV cache; oracle: tools/fixtures/make_video_fixtures.py,
// which let the processor sample the frames itself at fps 2.0 from the frames OpenCV decoded),
// and the bad-file table (truncated, zero-length, wrong magic, unsupported container and codec,
// huge dimensions, a 10-hour duration, audio only, 10,000 tiny frames, the decode time limit)
// answers 400 naming the part. The bad files are made here with Debian's ffmpeg CLI.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "server/http/base64.h"
#include "server/media/qwen2vl_media_loader.h"
#include "tests/support/qwen2vl_chat_cases.h"
#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

const std::string kClips = std::string(VLM_FIXTURES_DIR) + "/video";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::string data_url(const std::string& clip) {
  const std::string mime = clip.ends_with(".gif") ? "image/gif" : clip.ends_with(".webm") ? "video/webm" : "video/mp4";
  return "data:" + mime + ";base64," + base64_encode(slurp(kClips + "/" + clip));
}

// Where the tests' files live (--allowed-local-media-path): one directory per process, removed
// at exit.
const std::string& media_dir() {
  struct TempDir {
    std::string path;
    TempDir() : path("/tmp/vlm_video_test_" + std::to_string(getpid())) { fs::create_directories(path); }
    ~TempDir() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  };
  static const TempDir dir;
  return dir.path;
}

ServerProcess& server(const std::string& model, const std::vector<std::string>& extra = {}) {
  static std::map<std::string, std::unique_ptr<ServerProcess>> servers;
  std::string key = model;
  for (const auto& e : extra) key += " " + e;
  auto& s = servers[key];
  if (!s) {
    std::vector<std::string> args{"--model", qwen2vl_chat_model_dir(model), "--served-model-name", "qwen",
                                  "--kv-cache-dtype", "f32", "--num-kv-blocks", "128", "--max-model-len", "1024",
                                  "--threads", "2", "--log-level", "warn", "--max-video-frames", "8",
                                  "--allowed-local-media-path", media_dir()};
    args.insert(args.end(), extra.begin(), extra.end());
    s = std::make_unique<ServerProcess>(std::string(VLM_BIN_DIR) + "/vlm-server", args);
  }
  return *s;
}

ordered_json video_prompt(const ordered_json& video_part) {
  return ordered_json::array(
      {{{"role", "user"}, {"content", {video_part, {{"type", "text"}, {"text", "What moves in this video?"}}}}}});
}

const json& oracle() {
  static const json o = json::parse(slurp(kClips + "/oracle/oracle.json"));
  return o;
}

class VideoFileServerTest : public ::testing::TestWithParam<std::string> {};

// Both forms of a video-file part: OpenAI-style video_url with fps (a data: URL), and Qwen's
// {"type": "video", "video": "file://..."} with the default fps (2.0).
TEST_P(VideoFileServerTest, AnswersWithHfGreedyTokensAndLogprobs) {
  int cases = 0;
  for (const auto& rec : oracle()["models"]) {
    if (rec["model"] != GetParam() || rec.contains("probe")) continue;
    const std::string clip = rec["clip"];
    SCOPED_TRACE(clip);
    ++cases;
    const auto want_ids = rec["generated_ids"].get<std::vector<int32_t>>();
    const auto want_lps = rec["logprobs"].get<std::vector<double>>();
    ASSERT_EQ(rec["greedy_recompute_ids"].get<std::vector<int32_t>>(), want_ids);
    fs::copy_file(kClips + "/" + clip, media_dir() + "/" + clip, fs::copy_options::overwrite_existing);
    for (const ordered_json& part :
         {ordered_json{{"type", "video_url"}, {"video_url", {{"url", data_url(clip)}, {"fps", 2.0}}}},
          ordered_json{{"type", "video"}, {"video", "file://" + media_dir() + "/" + clip}}}) {
      const ordered_json body{{"messages", video_prompt(part)}, {"max_tokens", static_cast<int>(want_ids.size())},
                              {"temperature", 0}, {"logprobs", true}, {"return_token_ids", true}};
      HttpResult r = http_request("POST", server(GetParam()).base_url() + "/v1/chat/completions", body.dump());
      ASSERT_EQ(r.status, 200) << r.body;
      const json j = json::parse(r.body);
      EXPECT_EQ(j["choices"][0]["token_ids"].get<std::vector<int32_t>>(), want_ids)
          << part["type"] << " (HF min logit margin " << rec["min_margin"] << ")";
      EXPECT_EQ(j["usage"]["prompt_tokens"], rec["input_ids"].size());
      const json& content = j["choices"][0]["logprobs"]["content"];
      ASSERT_EQ(content.size(), want_lps.size());
      double worst = 0;
      for (size_t i = 0; i < want_lps.size(); ++i)
        worst = std::max(worst, std::abs(content[i]["logprob"].get<double>() - want_lps[i]));
      EXPECT_LE(worst, 1e-4) << "largest |logprob - HF|";
      std::printf("[ video    ] %s %s (%s): tokens equal HF's, max |logprob - HF| %.2e\n", GetParam().c_str(),
                  clip.c_str(), part["type"].get<std::string>().c_str(), worst);
      HttpResult t = http_request("POST", server(GetParam()).base_url() + "/tokenize",
                                  ordered_json{{"messages", video_prompt(part)}}.dump());
      ASSERT_EQ(t.status, 200) << t.body;
      EXPECT_EQ(json::parse(t.body)["tokens"].get<std::vector<int32_t>>(),
                rec["input_ids"].get<std::vector<int32_t>>());
    }
  }
  EXPECT_EQ(cases, 2);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, VideoFileServerTest,
                         ::testing::Values(std::string("qwen2_vl_chat"), std::string("qwen2_5_vl_chat")));

// The loader alone: the video grid, Qwen2.5-VL's second_per_grid_ts and the preprocessed pixels
// (their sum) as transformers' processor gave them, also when min_frames raises the count (the
// "probe": fps 1.0 on a 2 s clip takes 4 frames, sampled at 2.0 fps, so 2 / 2.0 = 1.0).
TEST(VideoFileLoader, GridSecondPerGridAndPixelsAsHf) {
  int checked = 0;
  for (const auto& rec : oracle()["models"]) {
    const std::string dir = std::string(VLM_FIXTURES_DIR) + "/qwen2vl_server/" + rec["model"].get<std::string>();
    const std::string clip = rec["clip"];
    SCOPED_TRACE(rec["model"].get<std::string>() + " " + clip);
    Qwen2VLMediaOptions o;
    o.image = Qwen2VLPreprocessConfig::load(dir, false);
    o.video = Qwen2VLPreprocessConfig::load(dir, true);
    o.sampling = VideoSamplingParams::load(dir);
    const Qwen2VLMediaLoader loader(MediaFetchOptions{}, ImageLimits{}, o);
    VideoSamplingParams p = o.sampling;
    if (rec.contains("probe")) p.fps = 1.0;
    const MediaPixels m = loader.load_video_file(data_url(clip), p, "v");
    const auto grid = rec["video_grid_thw"][0].get<std::vector<int32_t>>();
    EXPECT_EQ(std::vector<int32_t>(m.grid_thw.begin(), m.grid_thw.end()), grid);
    EXPECT_EQ(m.num_frames, 4);
    if (rec["model"] == "qwen2_5_vl_chat") EXPECT_FLOAT_EQ(m.second_per_grid, rec["second_per_grid_ts"][0].get<float>());
    if (rec.contains("pixel_values_videos_sum")) {
      double sum = 0;
      for (float v : m.data) sum += v;
      const double want = rec["pixel_values_videos_sum"].get<double>();
      EXPECT_NEAR(sum, want, 1e-4 * std::max(1.0, std::abs(want)));
    }
    ++checked;
  }
  EXPECT_EQ(checked, 6);
}

// Makes `name` in media_dir() with ffmpeg (arguments before the output); false when it fails.
bool ffmpeg(const std::string& args, const std::string& name) {
  const CommandResult r =
      run_command("ffmpeg -hide_banner -loglevel error -y " + args + " " + media_dir() + "/" + name + " 2>&1");
  if (r.exit_code != 0) ADD_FAILURE() << "ffmpeg " << args << ": " << r.output;
  return r.exit_code == 0;
}

struct BadFile {
  std::string name;
  std::string needle;  // in the 400's message
};

void expect_400(ServerProcess& s, const BadFile& b) {
  const ordered_json part{{"type", "video_url"}, {"video_url", {{"url", "file://" + media_dir() + "/" + b.name}}}};
  const auto t0 = std::chrono::steady_clock::now();
  HttpResult r = http_request("POST", s.base_url() + "/v1/chat/completions",
                              ordered_json{{"messages", video_prompt(part)}, {"max_tokens", 2}}.dump());
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.status, 400) << b.name << ": " << r.body;
  if (r.status != 400) return;
  const json e = json::parse(r.body)["error"];
  EXPECT_EQ(e["param"], "messages[0].content[0].video_url") << b.name;
  EXPECT_NE(e["message"].get<std::string>().find(b.needle), std::string::npos) << b.name << ": " << e["message"];
  std::printf("[ video    ] %-14s 400 in %6.1f ms: %s\n", b.name.c_str(), ms, e["message"].get<std::string>().c_str());
}

TEST(VideoFileServer, BadFilesAnswer400) {
  if (run_command("ffmpeg -version >/dev/null 2>&1").exit_code != 0)
    GTEST_SKIP() << "no ffmpeg CLI (scripts/setup.sh installs Debian's)";
  const std::string d = media_dir();
  const std::string mp4 = slurp(kClips + "/h264.mp4");
  write(d + "/truncated.mp4", mp4.substr(0, mp4.size() / 2));
  write(d + "/empty.mp4", "");
  write(d + "/text.mp4", "this is not a video, just some text that came with a .mp4 name\n");
  write(d + "/frame.png", slurp(std::string(VLM_FIXTURES_DIR) + "/qwen2vl_server/media/clip4_0.png"));
  std::string gif = slurp(kClips + "/anim.gif");
  gif[6] = gif[7] = gif[8] = gif[9] = '\xff';  // logical screen 65535 x 65535
  write(d + "/huge.gif", gif);
  ASSERT_TRUE(ffmpeg("-f lavfi -i color=c=blue:s=16x16:r=1/3600:d=36000 -c:v libx264 -preset ultrafast "
                     "-pix_fmt yuv420p", "ten_hours.mp4"));
  ASSERT_TRUE(ffmpeg("-f lavfi -i sine=d=1 -c:a aac", "audio.m4a"));
  ASSERT_TRUE(ffmpeg("-f lavfi -i color=c=red:s=16x16:r=1000:d=10 -c:v libx264 -preset ultrafast -pix_fmt yuv420p",
                     "many.mp4"));  // 10,000 frames
  ASSERT_TRUE(ffmpeg("-f lavfi -i testsrc2=s=64x48:r=10:d=1 -c:v mpeg4", "mpeg4.mp4"));
  ASSERT_TRUE(ffmpeg("-f lavfi -i testsrc2=s=64x48:r=10:d=1 -c:v mpeg4 -f avi", "clip.avi"));
  const std::vector<BadFile> table = {
      {"truncated.mp4", "truncated"},
      {"empty.mp4", "empty"},
      {"text.mp4", "not in a container"},
      {"frame.png", "is not accepted"},
      {"clip.avi", "container 'avi' is not accepted"},
      {"mpeg4.mp4", "codec 'mpeg4' is not accepted"},
      {"huge.gif", "65535x65535 pixels"},
      {"ten_hours.mp4", "lasts 36000 s"},
      {"audio.m4a", "no video stream"},
      {"many.mp4", "more than 7200 frames"},
      {"missing.mp4", "not found"},
  };
  ServerProcess& s = server("qwen2_vl_chat");
  for (const BadFile& b : table) expect_400(s, b);
  // The decode time limit: a server allowing the 10,000 frames but only 1 ms to read them.
  expect_400(server("qwen2_vl_chat", {"--max-video-file-frames", "20000", "--video-decode-timeout-ms", "1"}),
             {"many.mp4", "time limit (1 ms)"});
  // A refused file leaves the server serving: the good clip still answers.
  const ordered_json ok{{"type", "video_url"}, {"video_url", {{"url", data_url("anim.gif")}}}};
  EXPECT_EQ(http_request("POST", s.base_url() + "/v1/chat/completions",
                         ordered_json{{"messages", video_prompt(ok)}, {"max_tokens", 2}}.dump())
                .status,
            200);
}

TEST(VideoFileServer, SamplingParametersFromTheRequest) {
  ServerProcess& s = server("qwen2_vl_chat");
  auto prompt_tokens = [&](const ordered_json& video_url) {
    HttpResult r = http_request("POST", s.base_url() + "/tokenize",
                                ordered_json{{"messages", video_prompt({{"type", "video_url"}, {"video_url", video_url}})}}.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return r.status == 200 ? json::parse(r.body)["tokens"].size() : 0u;
  };
  const std::string url = data_url("rgb.mp4");  // 20 frames at 10 fps, 112x84: 48 tokens a grid step
  const size_t base = prompt_tokens({{"url", url}});  // fps 2.0: 4 frames, 2 grid steps
  EXPECT_EQ(prompt_tokens({{"url", url}, {"num_frames", 8}}), base + 2 * 12);  // 8 frames: 4 steps of 12
  EXPECT_EQ(prompt_tokens({{"url", url}, {"fps", 4.0}}), base + 2 * 12);       // 20/10*4 = 8 frames
  EXPECT_EQ(prompt_tokens({{"url", url}, {"fps", 10.0}}), base + 2 * 12);      // 20 frames, capped at 8
  EXPECT_EQ(prompt_tokens({{"url", url}, {"fps", 0.5}, {"min_frames", 6}}), base + 12);  // 6 frames
  auto refused = [&](const ordered_json& video_url, const std::string& needle) {
    HttpResult r = http_request("POST", s.base_url() + "/v1/chat/completions",
                                ordered_json{{"messages", video_prompt({{"type", "video_url"}, {"video_url", video_url}})},
                                             {"max_tokens", 2}}.dump());
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_NE(r.body.find(needle), std::string::npos) << r.body;
  };
  refused({{"url", url}, {"num_frames", 12}}, "at most 8");
  refused({{"url", url}, {"num_frames", 4}, {"fps", 2}}, "not both");
  refused({{"url", url}, {"num_frames", 0}}, "num_frames must be");
}

}  // namespace
}  // namespace vlm::testing

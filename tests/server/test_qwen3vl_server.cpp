// vlm-server serving Qwen3-VL over real HTTP: the tiny fixture model (tests/fixtures/qwen3vl,
// transformers 5.17) reads remapped ids (the fixture script's remap(): Qwen's special tokens to
// 2000.., others to 10 + id % 1990), so the test serves it with the real Qwen tokenizer through a
// widened copy of its checkpoint: embedding and LM-head row j of the real vocabulary (151936) is
// the tiny model's row remap(j) (the tiny ids no real id maps to, at otherwise unused ids above
// 151668). The widened model computes exactly what the tiny one does on the remapped prompt, so a
// chat holding case 1's image ("wide", as a BMP data URL: exact pixels) through the chat template,
// the tokenizer and the image loader must give the processor's input_ids and, under remap(), the
// tokens HF's generate() gave; so must case 3's video given as frames at 2 fps (timestamps
// written between its temporal groups).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "model/decoder/safetensors.h"
#include "server/http/base64.h"
#include "tests/support/qwen3vl_fixture.h"
#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

constexpr int64_t kRealVocab = 151936;
const std::vector<std::pair<int32_t, int32_t>> kSpecial = {  // real id -> tiny id
    {151643, 2000}, {151644, 2001}, {151645, 2002}, {151652, 2003}, {151653, 2004}, {151655, 2005}, {151656, 2006}};

// The tiny id the widened row j copies; the tiny ids without a real preimage sit at 151669 + i.
struct IdMap {
  std::vector<int32_t> tiny;  // [kRealVocab]
  IdMap() : tiny(kRealVocab) {
    for (int64_t j = 0; j < kRealVocab; ++j) tiny[j] = static_cast<int32_t>(10 + j % 1990);
    for (auto [real, t] : kSpecial) tiny[real] = t;
    int64_t next = 151669;
    for (int32_t t = 0; t < 2048; ++t)
      if (t < 10 || t > 2006) tiny[next++] = t;
  }
};

std::string widened_model_dir() {
  static const std::string dir = [] {
    const fs::path d = fs::temp_directory_path() / ("vlm_qwen3vl_server_" + std::to_string(::getpid()));
    fs::create_directories(d);
    const std::string src = qwen3vl_model_dir(), proc = qwen3vl_fixture_dir() + "/processor";
    json cfg = json::parse(std::ifstream(src + "/config.json"));
    cfg["text_config"]["vocab_size"] = kRealVocab;
    cfg["text_config"]["bos_token_id"] = 151643;
    cfg["text_config"]["eos_token_id"] = 151645;
    cfg["image_token_id"] = 151655;
    cfg["video_token_id"] = 151656;
    cfg["vision_start_token_id"] = 151652;
    cfg["vision_end_token_id"] = 151653;
    std::ofstream(d / "config.json") << cfg.dump(1);
    const auto st = SafetensorsFile::open(src + "/model.safetensors");
    std::map<std::string, TensorView> out = st->tensors();
    const IdMap map;
    std::vector<Tensor> keep;
    for (const char* name : {"model.language_model.embed_tokens.weight", "lm_head.weight"}) {
      const TensorView t = out.at(name);  // [2048, C]
      const size_t row = static_cast<size_t>(t.nbytes() / t.dim(0));
      Tensor w = Tensor::empty({kRealVocab, t.dim(1)}, t.dtype);
      for (int64_t j = 0; j < kRealVocab; ++j)
        std::memcpy(static_cast<char*>(w.data()) + j * row, static_cast<const char*>(t.data) + map.tiny[j] * row, row);
      out[name] = w.view();
      keep.push_back(std::move(w));
    }
    write_safetensors((d / "model.safetensors").string(), out);
    const std::string tok = std::string(VLM_FIXTURES_DIR) + "/../data/tokenizers/qwen3";
    fs::copy_file(tok + "/tokenizer.json", d / "tokenizer.json", fs::copy_options::overwrite_existing);
    for (const char* f : {"tokenizer_config.json", "processor_config.json"})
      fs::copy_file(proc + "/" + f, d / f, fs::copy_options::overwrite_existing);
    // The fixture's processor was built on the Qwen3 text tokenizer, so its chat_template.jinja is
    // Qwen3's text template (content as a string: the server would join an image part and a text
    // part with a newline). The project's ChatML template that renders each media part as the
    // Qwen-VL processors' prompts do (tools/fixtures/qwen2vl_chat_template.jinja) stands in.
    fs::copy_file(std::string(VLM_FIXTURES_DIR) + "/../../tools/fixtures/qwen2vl_chat_template.jinja",
                  d / "chat_template.jinja", fs::copy_options::overwrite_existing);
    return d.string();
  }();
  return dir;
}

// A 24-bit BMP of an RGB image [h, w, 3] (rows bottom-up, BGR, padded to 4 bytes).
std::string bmp(const uint8_t* rgb, int w, int h) {
  const int stride = (w * 3 + 3) / 4 * 4;
  const uint32_t size = 54 + static_cast<uint32_t>(stride * h);
  std::string b(size, '\0');
  auto put32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
  };
  b[0] = 'B', b[1] = 'M';
  put32(2, size);
  put32(10, 54);
  put32(14, 40);
  put32(18, static_cast<uint32_t>(w));
  put32(22, static_cast<uint32_t>(h));
  b[26] = 1;
  b[28] = 24;
  put32(34, static_cast<uint32_t>(stride * h));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) b[54 + static_cast<size_t>((h - 1 - y) * stride + x * 3 + c)] =
          static_cast<char>(rgb[(static_cast<size_t>(y) * w + x) * 3 + (2 - c)]);
  return b;
}

class Qwen3VLServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!qwen3vl_fixture_present()) return;
    server_ = new ServerProcess(std::string(VLM_BIN_DIR) + "/vlm-server",
                                std::vector<std::string>{"--model", widened_model_dir(), "--served-model-name", "qwen3vl",
                                                         "--kv-cache-dtype", "f32", "--num-kv-blocks", "64",
                                                         "--max-model-len", "512", "--threads", "2", "--log-level",
                                                         "warn", "--max-num-batched-tokens", "16"});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    if (!qwen3vl_fixture_present()) GTEST_SKIP() << "fixture tests/fixtures/qwen3vl not generated";
  }
  static HttpResult post(const std::string& path, const ordered_json& body) {
    return http_request("POST", server_->base_url() + path, body.dump());
  }
  static ordered_json case1_messages() {
    const auto media = SafetensorsFile::open(qwen3vl_fixture_dir() + "/media.safetensors");
    const TensorView& img = media->tensors().at("img.wide");  // [70, 150, 3]
    const std::string url = "data:image/bmp;base64," +
                            base64_encode(bmp(static_cast<const uint8_t*>(img.data), static_cast<int>(img.dim(1)),
                                              static_cast<int>(img.dim(0))));
    return ordered_json::array(
        {{{"role", "system"}, {"content", "You are a helpful assistant."}},
         {{"role", "user"},
          {"content", ordered_json::array({{{"type", "image_url"}, {"image_url", {{"url", url}}}},
                                           {{"type", "text"}, {"text", "What is in the picture?"}}})}}});
  }
  static ServerProcess* server_;
};
ServerProcess* Qwen3VLServerTest::server_ = nullptr;

TEST_F(Qwen3VLServerTest, TokenizeGivesTheProcessorsInputIds) {
  const auto ref = qwen3vl_reference();
  HttpResult r = post("/tokenize", {{"messages", case1_messages()}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["tokens"].get<std::vector<int32_t>>(), ref.ints("p1.proc_ids"));
}

TEST_F(Qwen3VLServerTest, ChatWithAnImageGivesHfGreedy) {
  const auto ref = qwen3vl_reference();
  const auto want = ref.ints("p1.generate");  // tiny ids
  HttpResult r = post("/v1/chat/completions", {{"messages", case1_messages()},
                                               {"max_tokens", static_cast<int>(want.size())},
                                               {"temperature", 0},
                                               {"return_token_ids", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  const auto got = j["choices"][0]["token_ids"].get<std::vector<int32_t>>();  // real ids
  const IdMap map;
  std::vector<int32_t> tiny;
  for (int32_t id : got) tiny.push_back(id >= 0 && id < kRealVocab ? map.tiny[static_cast<size_t>(id)] : -1);
  const auto margins = ref.floats("p1.margin");
  EXPECT_EQ(tiny, want) << "HF min logit margin " << *std::min_element(margins.begin(), margins.end());
  EXPECT_EQ(j["usage"]["prompt_tokens"], ref.ints("p1.ids").size());  // the image's 10 tokens counted
}

// Case 3's video as a list of frame URLs at 2 fps (64 x 96: no resize, exact pixels): the server
// writes each temporal group after its timestamp ("<0.2 seconds>", "<1.2 seconds>") as the
// processor does, so /tokenize gives its input_ids and the chat HF's greedy tokens under remap.
TEST_F(Qwen3VLServerTest, VideoFramesWithTimestampsGiveHfGreedy) {
  const auto ref = qwen3vl_reference();
  const auto media = SafetensorsFile::open(qwen3vl_fixture_dir() + "/media.safetensors");
  const TensorView& clip = media->tensors().at("vid.clip4");  // [4, 64, 96, 3]
  const int T = static_cast<int>(clip.dim(0)), H = static_cast<int>(clip.dim(1)), W = static_cast<int>(clip.dim(2));
  ordered_json frames = ordered_json::array();
  for (int t = 0; t < T; ++t)
    frames.push_back("data:image/bmp;base64," +
                     base64_encode(bmp(static_cast<const uint8_t*>(clip.data) + static_cast<size_t>(t) * H * W * 3, W, H)));
  const ordered_json messages = ordered_json::array(
      {{{"role", "system"}, {"content", "You are a helpful assistant."}},
       {{"role", "user"},
        {"content", ordered_json::array({{{"type", "video"}, {"video", frames}, {"fps", 2.0}},
                                         {{"type", "text"}, {"text", "What moves?"}}})}}});
  HttpResult t = post("/tokenize", {{"messages", messages}});
  ASSERT_EQ(t.status, 200) << t.body;
  EXPECT_EQ(json::parse(t.body)["tokens"].get<std::vector<int32_t>>(), ref.ints("p3.proc_ids"));
  const auto want = ref.ints("p3.generate");
  HttpResult r = post("/v1/chat/completions", {{"messages", messages},
                                               {"max_tokens", static_cast<int>(want.size())},
                                               {"temperature", 0},
                                               {"return_token_ids", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  const IdMap map;
  std::vector<int32_t> tiny;
  for (int32_t id : j["choices"][0]["token_ids"].get<std::vector<int32_t>>())
    tiny.push_back(id >= 0 && id < kRealVocab ? map.tiny[static_cast<size_t>(id)] : -1);
  const auto margins = ref.floats("p3.margin");
  EXPECT_EQ(tiny, want) << "HF min logit margin " << *std::min_element(margins.begin(), margins.end());
  EXPECT_EQ(j["usage"]["prompt_tokens"], ref.ints("p3.ids").size());
}

// The video-file case (case 5 of a fixture run that made it; skipped before): rgb.mp4 (lossless
// RGB) as a data URL, decoded by FFmpeg at the frames sample_frames picks (fps 2 of its 10), its
// groups after "<t seconds>" over the file's frame rate: the processor's input_ids, and HF's
// greedy tokens under remap.
TEST_F(Qwen3VLServerTest, VideoFileGivesHfGreedy) {
  const auto ref = qwen3vl_reference();
  if (!ref.has("p5.ids")) GTEST_SKIP() << "the fixture has no video-file case yet (rerun make_qwen3_vl_fixtures.py)";
  const auto cases = qwen3vl_cases();
  ASSERT_GE(cases.size(), 6u);
  std::ifstream f(std::string(VLM_FIXTURES_DIR) + "/video/" + cases[5].videos.at(0), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const ordered_json messages = ordered_json::array(
      {{{"role", "system"}, {"content", "You are a helpful assistant."}},
       {{"role", "user"},
        {"content", ordered_json::array({{{"type", "video_url"},
                                          {"video_url", {{"url", "data:video/mp4;base64," + base64_encode(bytes)}}}},
                                         {{"type", "text"}, {"text", "Describe the clip."}}})}}});
  HttpResult t = post("/tokenize", {{"messages", messages}});
  ASSERT_EQ(t.status, 200) << t.body;
  EXPECT_EQ(json::parse(t.body)["tokens"].get<std::vector<int32_t>>(), ref.ints("p5.proc_ids"));
  const auto want = ref.ints("p5.generate");
  HttpResult r = post("/v1/chat/completions", {{"messages", messages},
                                               {"max_tokens", static_cast<int>(want.size())},
                                               {"temperature", 0},
                                               {"return_token_ids", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  const IdMap map;
  std::vector<int32_t> tiny;
  for (int32_t id : json::parse(r.body)["choices"][0]["token_ids"].get<std::vector<int32_t>>())
    tiny.push_back(id >= 0 && id < kRealVocab ? map.tiny[static_cast<size_t>(id)] : -1);
  const auto margins = ref.floats("p5.margin");
  EXPECT_EQ(tiny, want) << "HF min logit margin " << *std::min_element(margins.begin(), margins.end());
}

// A video of one frame: the processor refuses fewer frames than temporal_patch_size, so do we (400).
TEST_F(Qwen3VLServerTest, OneFrameVideoIsRefused) {
  ordered_json m = case1_messages();
  const std::string url = m[1]["content"][0]["image_url"]["url"];
  m[1]["content"][0] = {{"type", "video"}, {"video", ordered_json::array({url})}, {"fps", 2.0}};
  HttpResult r = post("/v1/chat/completions", {{"messages", m}, {"max_tokens", 2}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("at least 2 frames"), std::string::npos) << r.body;
}

}  // namespace
}  // namespace vlm::testing

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
// Each test runs on three checkpoints (the test's parameter): the dense fixture ("dense"); a
// Qwen3-VL-MoE made from it with random experts stored as released (tests/support/
// qwen3vl_moe_checkpoint.h; "moe_random": the tokens the tiny MoE model gives on its own,
// testing::qwen3vl_run); and the Qwen3-VL-MoE HF fixture ("moe_hf", tests/fixtures/qwen3vl_moe:
// generate()'s tokens; skipped until made).
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
#include "model/families/qwen3_vl.h"
#include "tests/support/qwen3vl_fixture.h"
#include "tests/support/qwen3vl_moe_checkpoint.h"
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

// A widened copy of the tiny checkpoint in `src` (the dense fixture's processor and the real
// tokenizer beside it) under a fresh temporary directory named by `tag`.
std::string widen(const std::string& src, const std::string& tag) {
  const fs::path d = fs::temp_directory_path() / ("vlm_qwen3vl_server_" + tag + "_" + std::to_string(::getpid()));
  fs::create_directories(d);
  const std::string proc = qwen3vl_fixture_dir() + "/processor";
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

std::string margin_note(const Qwen3VLReference& ref, const std::string& p) {
  if (!ref.has(p + ".margin")) return "";
  const auto m = ref.floats(p + ".margin");
  return "HF min logit margin " + std::to_string(*std::min_element(m.begin(), m.end()));
}

const std::string kMoeFixture = std::string(VLM_FIXTURES_DIR) + "/qwen3vl_moe/qwen3_vl_moe_tiny";

// One served checkpoint: its widened copy, the server, the reference (ids, proc_ids, margins) and
// the tiny ids each case must generate.
struct Served {
  std::string dir;
  std::unique_ptr<ServerProcess> server;
  std::unique_ptr<Qwen3VLReference> ref;
  std::map<std::string, std::vector<int32_t>> want;  // "p1" -> tiny ids
};

std::unique_ptr<Served> serve(const std::string& kind) {
  auto s = std::make_unique<Served>();
  if (kind == "dense") {
    s->ref = std::make_unique<Qwen3VLReference>(qwen3vl_reference());
    s->dir = widen(qwen3vl_model_dir(), kind);
  } else if (kind == "moe_hf") {
    s->ref = std::make_unique<Qwen3VLReference>(qwen3vl_reference(kMoeFixture));
    s->dir = widen(kMoeFixture, kind);
  } else {  // moe_random: what the tiny MoE model generates on its own
    s->ref = std::make_unique<Qwen3VLReference>(qwen3vl_reference());
    MoeCheckpointSpec spec;
    spec.identical = false;
    spec.layout = ExpertLayout::FusedTransposed;
    const MoeCheckpoint ck(spec, "server");
    const auto model = Qwen3VLModel::load(ck.dir());
    for (int k : {1, 3, 5}) {
      const std::string p = "p" + std::to_string(k);
      if (!s->ref->has(p + ".ids")) continue;
      std::vector<float> rows;
      s->want[p] = qwen3vl_run(*model, *s->ref, k, 1000, static_cast<int>(s->ref->ints(p + ".generate").size()), rows);
    }
    s->dir = widen(ck.dir(), kind);
  }
  for (int k : {1, 3, 5}) {
    const std::string p = "p" + std::to_string(k);
    if (!s->want.count(p) && s->ref->has(p + ".generate")) s->want[p] = s->ref->ints(p + ".generate");
  }
  s->server = std::make_unique<ServerProcess>(
      std::string(VLM_BIN_DIR) + "/vlm-server",
      std::vector<std::string>{"--model", s->dir, "--served-model-name", "qwen3vl", "--kv-cache-dtype", "f32",
                               "--num-kv-blocks", "64", "--max-model-len", "512", "--threads", "2", "--log-level",
                               "warn", "--max-num-batched-tokens", "16"});
  return s;
}

class Qwen3VLServerTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void TearDownTestSuite() {
    for (auto& [kind, s] : all()) {
      s->server.reset();
      std::error_code ec;
      fs::remove_all(s->dir, ec);
    }
    all().clear();
  }
  void SetUp() override {
    if (!qwen3vl_fixture_present()) GTEST_SKIP() << "fixture tests/fixtures/qwen3vl not generated";
    if (GetParam() == "moe_hf" && !fs::exists(kMoeFixture + "/reference.safetensors"))
      GTEST_SKIP() << "fixture tests/fixtures/qwen3vl_moe not generated (tools/fixtures/make_qwen3_vl_moe_fixtures.py)";
    auto& slot = all()[GetParam()];
    if (!slot) slot = serve(GetParam());
    served_ = slot.get();
  }
  static std::map<std::string, std::unique_ptr<Served>>& all() {
    static std::map<std::string, std::unique_ptr<Served>> m;
    return m;
  }
  HttpResult post(const std::string& path, const ordered_json& body) const {
    return http_request("POST", served_->server->base_url() + path, body.dump());
  }
  const Qwen3VLReference& ref() const { return *served_->ref; }
  const std::vector<int32_t>& want(const std::string& p) const { return served_->want.at(p); }
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
  Served* served_ = nullptr;
};

TEST_P(Qwen3VLServerTest, TokenizeGivesTheProcessorsInputIds) {
  const Qwen3VLReference& ref = this->ref();
  HttpResult r = post("/tokenize", {{"messages", case1_messages()}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["tokens"].get<std::vector<int32_t>>(), ref.ints("p1.proc_ids"));
}

TEST_P(Qwen3VLServerTest, ChatWithAnImageGivesHfGreedy) {
  const Qwen3VLReference& ref = this->ref();
  const auto& want = this->want("p1");  // tiny ids
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
  EXPECT_EQ(tiny, want) << margin_note(ref, "p1");
  EXPECT_EQ(j["usage"]["prompt_tokens"], ref.ints("p1.ids").size());  // the image's 10 tokens counted
}

// Case 3's video as a list of frame URLs at 2 fps (64 x 96: no resize, exact pixels): the server
// writes each temporal group after its timestamp ("<0.2 seconds>", "<1.2 seconds>") as the
// processor does, so /tokenize gives its input_ids and the chat HF's greedy tokens under remap.
TEST_P(Qwen3VLServerTest, VideoFramesWithTimestampsGiveHfGreedy) {
  const Qwen3VLReference& ref = this->ref();
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
  const auto& want = this->want("p3");
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
  EXPECT_EQ(tiny, want) << margin_note(ref, "p3");
  EXPECT_EQ(j["usage"]["prompt_tokens"], ref.ints("p3.ids").size());
}

// The video-file case (case 5 of a fixture run that made it; skipped before): rgb.mp4 (lossless
// RGB) as a data URL, decoded by FFmpeg at the frames sample_frames picks (fps 2 of its 10), its
// groups after "<t seconds>" over the file's frame rate: the processor's input_ids, and HF's
// greedy tokens under remap.
TEST_P(Qwen3VLServerTest, VideoFileGivesHfGreedy) {
  const Qwen3VLReference& ref = this->ref();
  if (!ref.has("p5.ids")) GTEST_SKIP() << "this fixture has no video-file case (make_qwen3_vl_fixtures.py makes one)";
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
  const auto& want = this->want("p5");
  HttpResult r = post("/v1/chat/completions", {{"messages", messages},
                                               {"max_tokens", static_cast<int>(want.size())},
                                               {"temperature", 0},
                                               {"return_token_ids", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  const IdMap map;
  std::vector<int32_t> tiny;
  for (int32_t id : json::parse(r.body)["choices"][0]["token_ids"].get<std::vector<int32_t>>())
    tiny.push_back(id >= 0 && id < kRealVocab ? map.tiny[static_cast<size_t>(id)] : -1);
  EXPECT_EQ(tiny, want) << margin_note(ref, "p5");
}

// A video of one frame: the processor refuses fewer frames than temporal_patch_size, so do we (400).
TEST_P(Qwen3VLServerTest, OneFrameVideoIsRefused) {
  ordered_json m = case1_messages();
  const std::string url = m[1]["content"][0]["image_url"]["url"];
  m[1]["content"][0] = {{"type", "video"}, {"video", ordered_json::array({url})}, {"fps", 2.0}};
  HttpResult r = post("/v1/chat/completions", {{"messages", m}, {"max_tokens", 2}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("at least 2 frames"), std::string::npos) << r.body;
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, Qwen3VLServerTest, ::testing::Values("dense", "moe_random", "moe_hf"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace vlm::testing

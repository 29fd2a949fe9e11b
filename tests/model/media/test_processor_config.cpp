// The two layouts of a checkpoint's processor settings (model/media/processor_config.h): the
// transformers-5 fixtures (tests/fixtures/hf5_layout, one processor_config.json) give the same
// preprocessing settings as the separate files of the older fixtures the same processors wrote;
// a separate file wins over processor_config.json; a directory with neither names both places.
// The chat template loads from chat_template.jinja, chat_template.json or tokenizer_config.json.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "model/chat/chat_template.h"
#include "model/media/image_preprocess.h"
#include "model/media/qwen2vl_preprocess.h"

namespace vlm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kFix = VLM_FIXTURES_DIR;

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("vlm_proc_cfg_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
  std::string str() const { return path.string(); }
};

void expect_same(const Qwen2VLPreprocessConfig& a, const Qwen2VLPreprocessConfig& b) {
  EXPECT_EQ(a.min_pixels, b.min_pixels);
  EXPECT_EQ(a.max_pixels, b.max_pixels);
  EXPECT_EQ(a.patch_size, b.patch_size);
  EXPECT_EQ(a.temporal_patch_size, b.temporal_patch_size);
  EXPECT_EQ(a.merge_size, b.merge_size);
  EXPECT_EQ(a.mean, b.mean);
  EXPECT_EQ(a.std, b.std);
}

TEST(ProcessorConfig, Transformers5QwenLayoutEqualsTheSeparateFiles) {
  for (const auto& [hf5, old] : {std::pair{"qwen2_vl", "qwen2_vl_chat"}, std::pair{"qwen2_5_vl", "qwen2_5_vl_chat"}}) {
    const std::string a = kFix + "/hf5_layout/" + hf5, b = kFix + "/qwen2vl_server/" + old;
    ASSERT_FALSE(fs::exists(a + "/preprocessor_config.json"));
    for (bool video : {false, true}) expect_same(Qwen2VLPreprocessConfig::load(a, video), Qwen2VLPreprocessConfig::load(b, video));
  }
}

TEST(ProcessorConfig, Transformers5LlavaLayoutEqualsTheSeparateFile) {
  const auto a = ImagePreprocessConfig::load(kFix + "/hf5_layout/llava");
  const auto b = ImagePreprocessConfig::load(kFix + "/llava/processors/clip56_pad");
  EXPECT_TRUE(a.do_pad);
  EXPECT_EQ(a.do_pad, b.do_pad);
  EXPECT_EQ(a.shortest_edge, b.shortest_edge);
  EXPECT_EQ(a.crop_h, b.crop_h);
  EXPECT_EQ(a.crop_w, b.crop_w);
  EXPECT_EQ(a.mean, b.mean);
  EXPECT_EQ(a.std, b.std);
}

TEST(ProcessorConfig, SeparateFileWinsAndMissingNamesBothPlaces) {
  TempDir d;
  fs::copy_file(kFix + "/hf5_layout/qwen2_vl/processor_config.json", d.path / "processor_config.json");
  json j = json::parse(std::ifstream(kFix + "/hf5_layout/qwen2_vl/processor_config.json"));
  const int64_t nested_max = j["video_processor"]["size"]["longest_edge"].get<int64_t>();
  j["video_processor"]["size"]["longest_edge"] = 2 * nested_max;
  std::ofstream(d.path / "video_preprocessor_config.json") << j["video_processor"].dump();
  EXPECT_EQ(Qwen2VLPreprocessConfig::load(d.str(), true).max_pixels, 2 * nested_max);   // the separate file
  EXPECT_EQ(Qwen2VLPreprocessConfig::load(d.str(), false).max_pixels, nested_max);      // nested image_processor
  fs::remove(d.path / "processor_config.json");
  fs::remove(d.path / "video_preprocessor_config.json");
  try {
    ImagePreprocessConfig::load(d.str());
    ADD_FAILURE() << "loaded without any processor file";
  } catch (const LoadError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("preprocessor_config.json"), std::string::npos) << what;
    EXPECT_NE(what.find("processor_config.json"), std::string::npos) << what;
  }
}

TEST(ProcessorConfig, ChatTemplateFromEachFile) {
  const std::string src = kFix + "/hf5_layout/llava";
  std::ifstream in(src + "/chat_template.jinja");
  const std::string tmpl((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(tmpl.empty());
  TempDir d;
  fs::copy_file(src + "/tokenizer_config.json", d.path / "tokenizer_config.json");
  EXPECT_FALSE(ChatTemplate::load(d.str()).has_value());
  std::ofstream(d.path / "chat_template.json") << json{{"chat_template", tmpl}}.dump();
  EXPECT_EQ(ChatTemplate::load(d.str())->source(), tmpl);
  fs::remove(d.path / "chat_template.json");
  json cfg = json::parse(std::ifstream(src + "/tokenizer_config.json"));
  cfg["chat_template"] = tmpl;
  std::ofstream(d.path / "tokenizer_config.json") << cfg.dump();
  EXPECT_EQ(ChatTemplate::load(d.str())->source(), tmpl);
  fs::copy_file(src + "/chat_template.jinja", d.path / "chat_template.jinja");
  EXPECT_EQ(ChatTemplate::load(d.str())->origin(), (d.path / "chat_template.jinja").string());
}

}  // namespace
}  // namespace vlm

#include "tests/support/onevision_fixture.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "model/media/image_decode.h"
#include "model/media/onevision_preprocess.h"
#include "server/http/base64.h"

namespace vlm::testing {

namespace fs = std::filesystem;

const std::string& onevision_fixture_root() {
  static const std::string root = std::string(VLM_FIXTURES_DIR) + "/llava_onevision";
  return root;
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const std::string& onevision_model_dir() {
  static const std::string dir = [] {
    const fs::path d = fs::temp_directory_path() / ("vlm_ov_tiny_" + std::to_string(::getpid()));
    fs::create_directories(d);
    for (const auto& e : fs::directory_iterator(onevision_fixture_root() + "/ov_tiny"))
      fs::copy_file(e.path(), d / e.path().filename(), fs::copy_options::overwrite_existing);
    const std::string tok = std::string(VLM_FIXTURES_DIR) + "/../data/tokenizers/qwen3";
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(tok + "/" + f, d / f, fs::copy_options::overwrite_existing);
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(fs::temp_directory_path() / ("vlm_ov_tiny_" + std::to_string(::getpid())), ec);
    });
    return d.string();
  }();
  return dir;
}

nlohmann::json onevision_cases() {
  return nlohmann::json::parse(read_whole_file(onevision_fixture_root() + "/ov_tiny/cases.json"));
}

std::string onevision_data_url(const std::string& media_file) {
  return "data:image/png;base64," + base64_encode(read_whole_file(onevision_fixture_root() + "/media/" + media_file));
}

std::string onevision_gpu_root() { return std::string(VLM_FIXTURES_DIR) + "/llava_onevision_gpu"; }
std::string onevision_gpu_model_dir() { return onevision_gpu_root() + "/ov_gpu"; }

std::vector<OnevisionCase> onevision_recorded_cases(const std::string& root, const std::string& model_dir) {
  const OnevisionPreprocessConfig image = OnevisionPreprocessConfig::load(model_dir, false);
  const OnevisionPreprocessConfig video = OnevisionPreprocessConfig::load(model_dir, true);
  auto png = [&root](const std::string& name) {
    const std::string b = read_whole_file(root + "/media/" + name);
    return decode_image({reinterpret_cast<const uint8_t*>(b.data()), b.size()});
  };
  std::vector<OnevisionCase> out;
  for (const auto& c : nlohmann::json::parse(read_whole_file(model_dir + "/cases.json"))) {
    std::vector<MediaPixels> images, videos;
    for (const auto& m : c["messages"])
      for (const auto& p : m["content"]) {
        if (p["type"] == "image") images.push_back(preprocess_onevision_image(png(p["media"][0]), image));
        if (p["type"] == "video") {
          std::vector<RgbImage> frames;
          for (const auto& f : p["media"]) frames.push_back(png(f));
          videos.push_back(preprocess_onevision_video(frames, video));
        }
      }
    images.insert(images.end(), videos.begin(), videos.end());
    out.push_back({c, std::move(images)});
  }
  return out;
}

}  // namespace vlm::testing

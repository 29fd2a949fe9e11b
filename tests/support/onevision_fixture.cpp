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

namespace {

// The Qwen3 tokenizer: tests/data's (scripts/fetch_test_data.sh), else a GPU bundle's beside the
// running binary (BIN/../tokenizer, scripts/gpu_bundle.sh).
std::string qwen3_tokenizer_dir() {
  const std::string data = std::string(VLM_FIXTURES_DIR) + "/../data/tokenizers/qwen3";
  if (fs::exists(data + "/tokenizer.json")) return data;
  std::error_code ec;
  const fs::path bundle = fs::read_symlink("/proc/self/exe", ec).parent_path().parent_path() / "tokenizer";
  if (!ec && fs::exists(bundle / "tokenizer.json")) return bundle.string();
  throw std::runtime_error("no Qwen3 tokenizer in " + data + " (scripts/fetch_test_data.sh) nor in " + bundle.string());
}

// MODEL_DIR's files with the Qwen3 tokenizer, in a directory under /tmp named after TAG and the
// process, removed at exit.
std::string served_copy(const std::string& model_dir, const std::string& tag) {
  const fs::path d = fs::temp_directory_path() / ("vlm_" + tag + "_" + std::to_string(::getpid()));
  fs::create_directories(d);
  for (const auto& e : fs::directory_iterator(model_dir))
    fs::copy_file(e.path(), d / e.path().filename(), fs::copy_options::overwrite_existing);
  const std::string tok = qwen3_tokenizer_dir();
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(tok + "/" + f, d / f, fs::copy_options::overwrite_existing);
  return d.string();
}

void remove_served_copies() {
  std::error_code ec;
  for (const char* tag : {"ov_tiny", "ov_gpu"})
    fs::remove_all(fs::temp_directory_path() / ("vlm_" + std::string(tag) + "_" + std::to_string(::getpid())), ec);
}

}  // namespace

const std::string& onevision_model_dir() {
  static const std::string dir = [] {
    std::string d = served_copy(onevision_fixture_root() + "/ov_tiny", "ov_tiny");
    std::atexit(remove_served_copies);
    return d;
  }();
  return dir;
}

const std::string& onevision_gpu_served_dir() {
  static const std::string dir = [] {
    std::string d = served_copy(onevision_gpu_model_dir(), "ov_gpu");
    std::atexit(remove_served_copies);
    return d;
  }();
  return dir;
}

nlohmann::json onevision_cases() {
  return nlohmann::json::parse(read_whole_file(onevision_fixture_root() + "/ov_tiny/cases.json"));
}

std::string onevision_data_url(const std::string& media_file, const std::string& root) {
  return "data:image/png;base64," + base64_encode(read_whole_file(root + "/media/" + media_file));
}
std::string onevision_data_url(const std::string& media_file) {
  return onevision_data_url(media_file, onevision_fixture_root());
}

nlohmann::ordered_json onevision_openai_messages(const nlohmann::json& c, const std::string& root) {
  using nlohmann::ordered_json;
  ordered_json out = ordered_json::array();
  for (const auto& m : c["messages"]) {
    ordered_json msg{{"role", m["role"]}, {"content", ordered_json::array()}};
    for (const auto& p : m["content"]) {
      if (p["type"] == "image") {
        msg["content"].push_back(
            {{"type", "image_url"}, {"image_url", {{"url", onevision_data_url(p["media"][0], root)}}}});
      } else if (p["type"] == "video") {
        ordered_json frames = ordered_json::array();
        for (const auto& f : p["media"]) frames.push_back(onevision_data_url(f, root));
        msg["content"].push_back({{"type", "video_url"}, {"video_url", {{"url", frames}}}});
      } else {
        msg["content"].push_back({{"type", "text"}, {"text", p["text"]}});
      }
    }
    out.push_back(msg);
  }
  return out;
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

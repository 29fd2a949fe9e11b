#include "tests/support/onevision_fixture.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

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

}  // namespace vlm::testing

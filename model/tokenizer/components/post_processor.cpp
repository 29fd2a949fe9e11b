#include "model/tokenizer/components/post_processor.h"

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"

namespace vlm {
namespace {

using nlohmann::json;

class Wrap final : public PostProcessor {
 public:
  Wrap(std::vector<int32_t> prefix, std::vector<int32_t> suffix)
      : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}
  void process(std::vector<int32_t>& ids) const override {
    ids.insert(ids.begin(), prefix_.begin(), prefix_.end());
    ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  }

 private:
  std::vector<int32_t> prefix_, suffix_;
};

class Identity final : public PostProcessor {
 public:
  void process(std::vector<int32_t>&) const override {}
};

class Sequence final : public PostProcessor {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PostProcessor>> steps) : steps_(std::move(steps)) {}
  void process(std::vector<int32_t>& ids) const override {
    for (const auto& s : steps_) s->process(ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw LoadError(source + ": post_processor " + what);
}

// TemplateProcessing's "single" template: the items before the "A" sequence form the prefix,
// those after it the suffix.
std::unique_ptr<PostProcessor> template_processing(const json& j, const std::string& source) {
  auto single = j.find("single");
  if (single == j.end() || !single->is_array()) fail(source, "TemplateProcessing: missing array 'single'");
  const json specials = j.value("special_tokens", json::object());
  std::vector<int32_t> prefix, suffix;
  bool seen_sequence = false;
  for (const json& item : *single) {
    if (item.contains("Sequence")) {
      const std::string id = item["Sequence"].value("id", std::string("A"));
      if (id != "A") fail(source, "TemplateProcessing: the single template uses sequence '" + id + "'");
      if (seen_sequence) fail(source, "TemplateProcessing: the single template repeats its sequence");
      seen_sequence = true;
    } else if (item.contains("SpecialToken")) {
      const std::string name = item["SpecialToken"].value("id", std::string());
      auto it = specials.find(name);
      if (it == specials.end() || !it->contains("ids") || !(*it)["ids"].is_array())
        fail(source, "TemplateProcessing: special token '" + name + "' is not in 'special_tokens'");
      for (const json& id : (*it)["ids"]) {
        if (!id.is_number_integer()) fail(source, "TemplateProcessing: bad id for '" + name + "'");
        (seen_sequence ? suffix : prefix).push_back(id.get<int32_t>());
      }
    } else {
      fail(source, "TemplateProcessing: unknown template item " + item.dump());
    }
  }
  if (!seen_sequence) fail(source, "TemplateProcessing: the single template has no sequence");
  return PostProcessor::wrap(std::move(prefix), std::move(suffix));
}

// {"cls": ["<s>", 0], "sep": ["</s>", 2]}
int32_t pair_id(const json& j, const char* key, const std::string& source, const std::string& type) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer())
    fail(source, type + ": '" + key + "' must be [token, id]");
  return (*it)[1].get<int32_t>();
}

}  // namespace

std::unique_ptr<PostProcessor> PostProcessor::wrap(std::vector<int32_t> prefix, std::vector<int32_t> suffix) {
  return std::make_unique<Wrap>(std::move(prefix), std::move(suffix));
}

std::unique_ptr<PostProcessor> PostProcessor::from_json(const json& j, const std::string& source) {
  if (j.is_null()) return nullptr;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    throw LoadError(source + ": post_processor must be an object with a string 'type'");
  const std::string type = j["type"].get<std::string>();
  if (type == "TemplateProcessing") return template_processing(j, source);
  if (type == "ByteLevel") return std::make_unique<Identity>();  // trims offsets only
  if (type == "BertProcessing" || type == "RobertaProcessing")
    return wrap({pair_id(j, "cls", source, type)}, {pair_id(j, "sep", source, type)});
  if (type == "Sequence") {
    auto it = j.find("processors");
    if (it == j.end() || !it->is_array()) fail(source, "Sequence: missing array 'processors'");
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (const json& s : *it)
      if (auto step = from_json(s, source)) steps.push_back(std::move(step));
    return std::make_unique<Sequence>(std::move(steps));
  }
  throw LoadError(source + ": post_processor type '" + type +
                  "' is not supported (supported: TemplateProcessing, BertProcessing, "
                  "RobertaProcessing, ByteLevel, Sequence)");
}

}  // namespace vlm

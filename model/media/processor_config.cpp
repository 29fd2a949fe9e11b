#include "model/media/processor_config.h"

#include <filesystem>

#include "kernels/core/check.h"
#include "model/decoder/json_file.h"

namespace vlm {

std::optional<ProcessorSettings> find_processor_settings(const std::string& model_dir, const std::string& file,
                                                         const std::string& key) {
  const std::string separate = model_dir + "/" + file;
  if (std::filesystem::exists(separate)) return ProcessorSettings{read_json_file(separate), separate};
  const std::string combined = model_dir + "/processor_config.json";
  if (!std::filesystem::exists(combined)) return std::nullopt;
  nlohmann::json j = read_json_file(combined);
  if (!j.is_object() || !j.contains(key)) return std::nullopt;
  if (!j[key].is_object()) throw LoadError(combined + ": \"" + key + "\" is not a JSON object");
  return ProcessorSettings{std::move(j[key]), combined + " (" + key + ")"};
}

ProcessorSettings image_processor_settings(const std::string& model_dir) {
  if (auto s = find_processor_settings(model_dir, "preprocessor_config.json", "image_processor")) return *s;
  throw LoadError(model_dir + "/preprocessor_config.json: cannot open (and no \"image_processor\" in " + model_dir +
                  "/processor_config.json)");
}

}  // namespace vlm

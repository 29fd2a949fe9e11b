// Where a checkpoint keeps its processors' settings. transformers < 5 writes one file per
// processor (preprocessor_config.json for images, video_preprocessor_config.json for videos);
// transformers >= 5 writes one processor_config.json with each processor's settings nested under
// its attribute name ("image_processor", "video_processor"). Both layouts are read; the separate
// file wins when both exist, as in transformers.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace vlm {

struct ProcessorSettings {
  nlohmann::json json;  // the processor's settings (an object)
  std::string source;   // "DIR/preprocessor_config.json" or "DIR/processor_config.json (image_processor)"
};

// DIR/`file` when it exists, else DIR/processor_config.json's `key` object; nullopt when neither.
// Throws LoadError naming the file when the one found is not valid JSON, or when `key` is there but
// not an object.
std::optional<ProcessorSettings> find_processor_settings(const std::string& model_dir, const std::string& file,
                                                         const std::string& key);

// The image processor's settings (preprocessor_config.json / "image_processor"). Throws LoadError
// naming both places when neither holds them.
ProcessorSettings image_processor_settings(const std::string& model_dir);

}  // namespace vlm

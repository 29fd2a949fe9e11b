// The model vlm-server serves: its checkpoint loaded by architecture (model/families/architecture.h),
// its weights paged in once, the media options its family's loaders take (into ApiServerOptions),
// and the Engine over it.
#pragma once

#include <memory>
#include <string>

#include "engine/engine.h"
#include "model/tokenizer/tokenizer.h"
#include "model/decoder/weights.h"
#include "server/api_server.h"
#include "tools/vlm-server/server_flags.h"

namespace vlm::server_cli {

// Loads model_dir as its config.json's architecture says and fills api.images / qwen2vl / qwen3vl /
// onevision for its family. Throws LoadError for a checkpoint whose processor settings disagree with
// its vision tower (patch, merge or temporal sizes; image or tile size), naming both.
std::unique_ptr<Engine> load_served_model(const std::string& model_dir, const WeightLoadOptions& load,
                                          const EngineConfig& ec, const MediaFlags& media,
                                          std::shared_ptr<const Tokenizer> tokenizer, ApiServerOptions& api);

}  // namespace vlm::server_cli

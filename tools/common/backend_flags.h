// The backend flags every tool that runs a model shares, with vLLM's names:
//   --device auto|cuda|cpu          (auto: cuda when built with it and a GPU is visible)
//   --dtype auto|bfloat16|float16|float32   (auto: the checkpoint's; float32 on the GPU is the
//                                     exact path)
//   --gpu-memory-utilization F      (0.9; the KV cache takes what weights and activations leave)
#pragma once

#include <map>
#include <string>

#include "engine/engine_config.h"
#include "tools/common/cli_flags.h"

namespace vlm::cli {

// Adds the three flags' help lines to `table`.
void add_backend_flags(FlagTable& table);

// Applies whichever of the three are in `flags` to `config`; parser.fail()s on a bad value.
void apply_backend_flags(const std::map<std::string, std::string>& flags, const FlagParser& parser,
                         EngineConfig& config);

}  // namespace vlm::cli

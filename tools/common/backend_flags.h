// The backend flags every tool that runs a model shares, with vLLM's names:
//   --device auto|cuda|cpu          (auto: cuda when built with it and a GPU is visible)
//   --dtype auto|bfloat16|float16|float32   (auto: the checkpoint's; float32 on the GPU is the
//                                     exact path)
//   --gpu-memory-utilization F      (0.9; the KV cache takes what weights and activations leave)
//   --max-media-patches N           (32768; the GPU vision encoder's reservation, in encoder rows)
//   --gemm-activations f32|bf16     (the older CPU flag: an alias of --dtype float32|bfloat16)
//   --kv-cache-dtype auto|f32|bf16|f16|fp8  (the CPU's KV cache; auto: f32 with --dtype float32, the
//                                     exact path, else bf16 -- vLLM's auto, the model's dtype; fp8: the
//                                     GPU's FP8 E4M3 cache, refused on the CPU)
//   --quantization none|fp8         (GPU: FP8 E4M3 decoder linear layers, quantized at load)
//   --load-format auto|safetensors|dummy  (dummy: random weights made from config.json alone,
//                                     WeightStore::dummy; on the GPU streamed, one tensor at a time)
#pragma once

#include <map>
#include <string>

#include "engine/engine_config.h"
#include "model/decoder/weights.h"
#include "tools/common/cli_flags.h"

namespace vlm::cli {

// Adds the flags' help lines to `table`.
void add_backend_flags(FlagTable& table);

// Applies whichever of them are in `flags` to `config` (config.kv_dtype always: the flag's or
// auto's); parser.fail()s on a bad value.
void apply_backend_flags(const std::map<std::string, std::string>& flags, const FlagParser& parser,
                         EngineConfig& config);

// --load-format as WeightLoadOptions (auto when absent); parser.fail()s on another value. A dummy
// load streams (kDummyStreamBytes held on the host) when `config` runs on the GPU (device cuda,
// or auto with a GPU visible), and keeps every tensor for the CPU backend.
WeightLoadOptions load_options(const std::map<std::string, std::string>& flags, const FlagParser& parser,
                               const EngineConfig& config);

}  // namespace vlm::cli

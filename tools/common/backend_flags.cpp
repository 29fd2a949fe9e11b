#include "tools/common/backend_flags.h"

#include "engine/backends/make_step_backend.h"

namespace vlm::cli {

void add_backend_flags(FlagTable& table) {
  table["device"] = "auto (default: cuda when built with CUDA and a GPU is visible), cuda or cpu";
  table["dtype"] = "auto (default: the checkpoint's), bfloat16, float16 or float32 (the exact GPU path)";
  table["gpu-memory-utilization"] = "fraction of GPU memory to use; the KV cache takes the rest (default 0.9)";
}

void apply_backend_flags(const std::map<std::string, std::string>& flags, const FlagParser& parser,
                         EngineConfig& config) {
  if (auto it = flags.find("device"); it != flags.end()) {
    const auto d = parse_device(it->second);
    if (!d) parser.fail("--device must be auto, cuda or cpu, got '" + it->second + "'");
    config.device = *d;
  }
  if (auto it = flags.find("dtype"); it != flags.end()) {
    const std::string& v = it->second;
    if (v == "auto") config.dtype.reset();
    else if (v == "bfloat16") config.dtype = DType::BF16;
    else if (v == "float16") config.dtype = DType::F16;
    else if (v == "float32") config.dtype = DType::F32;
    else parser.fail("--dtype must be auto, bfloat16, float16 or float32, got '" + v + "'");
  }
  if (auto it = flags.find("gpu-memory-utilization"); it != flags.end())
    config.gpu_memory_utilization = parser.number("gpu-memory-utilization", it->second, 0.0, 1.0, true);
}

}  // namespace vlm::cli

#include "tools/common/backend_flags.h"

#include "engine/backends/make_step_backend.h"

namespace vlm::cli {

void add_backend_flags(FlagTable& table) {
  table["device"] = "auto (default: cuda when built with CUDA and a GPU is visible), cuda or cpu";
  table["dtype"] =
      "auto (default: the checkpoint's; a bf16 checkpoint on a CPU with AVX512-BF16 runs bf16 activations), "
      "bfloat16, float16 or float32 (the exact path, CPU and GPU)";
  table["gemm-activations"] = "older alias of --dtype: f32 = float32, bf16 = bfloat16";
  table["gpu-memory-utilization"] = "fraction of GPU memory to use; the KV cache takes the rest (default 0.9)";
  table["max-media-patches"] =
      "GPU: vision-encoder rows (patches; LLaVA: image tokens) one encoder call holds, reserved before the KV cache; "
      "Qwen2-VL videos beyond it encode in whole-frame groups, an image or frame beyond it is refused with a 400 "
      "(default 32768: a 64-frame 448x448 Qwen2-VL video per call)";
  table["media-step-patches"] =
      "GPU: media beyond this many patches (a long video) encode in whole-frame groups as the prefill chunks reach "
      "them, bounding one step's encode (default: 4 x --max-num-batched-tokens, 8192 for 2048; 0: a step's media "
      "encode whole)";
  table["kv-cache-dtype"] =
      "auto (default: f32 with --dtype float32, the exact path; else bf16), f32, bf16 or f16: the CPU's KV cache "
      "(the GPU keeps its cache in the model dtype); fp8 (or fp8_e4m3): the GPU's cache in FP8 E4M3 with static "
      "per-layer, per-head scales (the checkpoint's k_scale/v_scale, else 1.0; Hopper GPUs; not with sparse "
      "prefill or LOOK-M)";
  table["enforce-eager"] = "1: GPU decode steps without CUDA graphs (default 0: graphs per batch/context bucket)";
  table["tensor-parallel-size"] =
      "N (also -tp N; default 1): the decoder split over GPUs 0..N-1 (heads, MLP columns and vocabulary; NCCL "
      "all-reduces). Needs --device cuda, N visible GPUs, NCCL (libnccl.so.2, Python's nvidia-nccl package or "
      "VLM_NCCL_LIBRARY), N dividing the query heads and the MLP and dividing the KV heads (or a multiple of "
      "them); dense models only; no LOOK-M, sparse prefill, SinkRouter, FP8 KV cache or --quantization fp8 yet";
  table["mm-encoder-devices"] =
      "N (default 0: every rank's GPU, a vision tower on each, a step's media split over them and every row "
      "gathered to every rank; vLLM's --mm-encoder-tp-mode data): under --tensor-parallel-size, the GPUs the "
      "vision encoder runs on, the first N ranks' (1: GPU 0 encodes, every rank gets the rows)";
  table["quantization"] =
      "none (default) or fp8: the GPU decoder's linear layers quantized to FP8 E4M3 at load (per-channel weight "
      "scales, per-token activation scales; vision tower and LM head stay bf16; Hopper GPUs). FP8 "
      "checkpoints (quantization_config) load as FP8 without it";
  table["load-format"] =
      "auto (default) or safetensors: the checkpoint's safetensors; dummy: random weights made from config.json "
      "alone (no safetensors; deterministic, seeded by each tensor's name), for measuring a model's shape";
}

void apply_backend_flags(const std::map<std::string, std::string>& flags, const FlagParser& parser,
                         EngineConfig& config) {
  if (auto it = flags.find("device"); it != flags.end()) {
    const auto d = parse_device(it->second);
    if (!d) parser.fail("--device must be auto, cuda or cpu, got '" + it->second + "'");
    config.device = *d;
  }
  if (auto it = flags.find("gemm-activations"); it != flags.end()) {
    if (flags.count("dtype")) parser.fail("give --dtype or its alias --gemm-activations, not both");
    if (it->second == "f32") config.dtype = DType::F32;
    else if (it->second == "bf16") config.dtype = DType::BF16;
    else parser.fail("--gemm-activations must be f32 or bf16 (an alias of --dtype float32|bfloat16), got '" + it->second + "'");
  }
  if (auto it = flags.find("dtype"); it != flags.end()) {
    const std::string& v = it->second;
    if (v == "auto") config.dtype.reset();
    else if (v == "bfloat16") config.dtype = DType::BF16;
    else if (v == "float16") config.dtype = DType::F16;
    else if (v == "float32") config.dtype = DType::F32;
    else parser.fail("--dtype must be auto, bfloat16, float16 or float32, got '" + v + "'");
  }
  // After --dtype: auto follows it.
  if (auto it = flags.find("kv-cache-dtype"); it != flags.end() && it->second != "auto") {
    if (it->second == "fp8" || it->second == "fp8_e4m3") config.kv_dtype = DType::F8_E4M3;  // vLLM's names
    else if (!parse_float_dtype_name(it->second, &config.kv_dtype))
      parser.fail("--kv-cache-dtype must be auto, f32, bf16, f16 or fp8, got '" + it->second + "'");
  } else {
    config.kv_dtype = config.dtype == DType::F32 ? DType::F32 : DType::BF16;
  }
  if (auto it = flags.find("gpu-memory-utilization"); it != flags.end())
    config.gpu_memory_utilization = parser.number("gpu-memory-utilization", it->second, 0.0, 1.0, true);
  if (auto it = flags.find("max-media-patches"); it != flags.end())
    config.max_media_patches = parser.integer("max-media-patches", it->second, 1);
  if (auto it = flags.find("media-step-patches"); it != flags.end())
    config.media_step_patches = parser.integer("media-step-patches", it->second, 0);
  if (auto it = flags.find("enforce-eager"); it != flags.end()) {
    const std::string& v = it->second;
    if (v == "1" || v == "true" || v == "on") config.enforce_eager = true;
    else if (v == "0" || v == "false" || v == "off") config.enforce_eager = false;
    else parser.fail("--enforce-eager must be 1/true/on or 0/false/off, got '" + v + "'");
  }
  if (auto it = flags.find("tensor-parallel-size"); it != flags.end())
    config.tensor_parallel_size = static_cast<int>(parser.integer("tensor-parallel-size", it->second, 1));
  if (auto it = flags.find("mm-encoder-devices"); it != flags.end())
    config.mm_encoder_devices = static_cast<int>(parser.integer("mm-encoder-devices", it->second, 0));
  if (auto it = flags.find("quantization"); it != flags.end()) {
    if (it->second == "fp8") config.quantize_fp8 = true;
    else if (it->second == "none") config.quantize_fp8 = false;
    else parser.fail("--quantization must be none or fp8, got '" + it->second + "'");
  }
}

WeightLoadOptions load_options(const std::map<std::string, std::string>& flags, const FlagParser& parser,
                               const EngineConfig& config) {
  WeightLoadOptions o;
  if (auto it = flags.find("load-format"); it != flags.end()) {
    const auto f = parse_load_format(it->second);
    if (!f) parser.fail("--load-format must be auto, safetensors or dummy, got '" + it->second + "'");
    o.format = *f;
  }
  const bool gpu = config.device == Device::Cuda || (config.device == Device::Auto && cuda_available());
  if (o.format == LoadFormat::Dummy && gpu) o.dummy_keep_bytes = kDummyStreamBytes;
  return o;
}

}  // namespace vlm::cli

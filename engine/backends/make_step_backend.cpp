#include "engine/backends/make_step_backend.h"

#include <fmt/format.h>

#include "engine/backends/cpu_backend.h"
#include "engine/backends/cuda_model_support.h"
#include "engine/backends/fault_injection_backend.h"
#include "engine/compute_dtype.h"
#include "kernels/core/check.h"
#include "kernels/core/log.h"
#include "model/layers/tensor_parallel.h"
#if VLM_HAVE_CUDA
#include "engine/cuda/cuda_backend.h"
#include "kernels/cuda/core/cuda_check.h"
#endif

namespace vlm {

std::optional<Device> parse_device(const std::string& name) {
  if (name == "auto") return Device::Auto;
  if (name == "cpu") return Device::Cpu;
  if (name == "cuda") return Device::Cuda;
  return std::nullopt;
}

const char* device_name(Device d) {
  switch (d) {
    case Device::Auto: return "auto";
    case Device::Cpu: return "cpu";
    case Device::Cuda: return "cuda";
  }
  return "?";
}

bool cuda_available(std::string* why) {
#if VLM_HAVE_CUDA
  return cuda::visible_gpus(why) > 0;
#else
  if (why) *why = "this build has no CUDA backend (configure with VLM_CUDA=ON)";
  return false;
#endif
}

namespace {

// Only a max_model_len the user asked for (EngineConfig::max_model_len > 0) must fit: one taken from
// the model is lowered to the cache's capacity by the Engine instead (with a warning).
void check_holds_one_sequence(int64_t num_blocks, int block_size, int64_t bytes_per_block, int64_t max_len,
                              bool user_set) {
  if (!user_set || num_blocks * block_size >= max_len) return;
  throw LoadError(fmt::format(
      "engine config: a KV cache of {} blocks of {} tokens ({:.3f} GiB, {} bytes per block) holds {} tokens, "
      "less than one sequence of --max-model-len {}; give the cache more memory or lower --max-model-len (at "
      "most {} here)",
      num_blocks, block_size, static_cast<double>(num_blocks * bytes_per_block) / (1 << 30), bytes_per_block,
      num_blocks * block_size, max_len, num_blocks * block_size));
}

// --tensor-parallel-size N > 1: what must hold before any GPU is opened (LoadError naming it).
void check_tensor_parallel(const EngineConfig& c, const Model& model, Device device) {
  const int n = c.tensor_parallel_size;
  if (n < 1) throw LoadError(fmt::format("--tensor-parallel-size {}: must be at least 1", n));
  if (n == 1) return;
  // LOOK-M: each rank selects and compacts its own KV heads (CudaLookMStep), so they must split.
  const int64_t kv_heads = model.decoder().config().num_kv_heads;
  if (c.look_m.enabled && kv_heads % n != 0)
    throw LoadError(fmt::format("--tensor-parallel-size {}: LOOK-M needs the KV heads split over the ranks (the "
                                "model's {} KV head{} would be replicated)",
                                n, kv_heads, kv_heads == 1 ? "" : "s"));
  if (c.mm_encoder_devices < 0 || c.mm_encoder_devices > n)
    throw LoadError(fmt::format("--mm-encoder-devices {}: between 0 (every rank's GPU) and --tensor-parallel-size {}",
                                c.mm_encoder_devices, n));
  // SinkRouter routes a rank's whole KV groups.
  if (c.sink_router && kv_heads % n != 0 && n % kv_heads == 0)
    throw LoadError(fmt::format("--tensor-parallel-size {}: SinkRouter needs the KV heads split over the ranks, but "
                                "{} KV head{} replicated (a group's query heads would be on several ranks)",
                                n, kv_heads, kv_heads == 1 ? " is" : "s are"));
  if (device != Device::Cuda)
    throw LoadError(fmt::format("--tensor-parallel-size {} runs on GPUs (--device cuda; here: {}); the CPU's tensor "
                                "parallelism is a test reference only",
                                n, c.device == Device::Auto ? "--device auto chose the CPU" : "--device cpu"));
#if VLM_HAVE_CUDA
  std::string why;
  const int gpus = cuda::visible_gpus(&why);
  if (gpus < n)
    throw LoadError(fmt::format("--tensor-parallel-size {}: only {} GPU{} visible{}", n, gpus, gpus == 1 ? "" : "s",
                                why.empty() ? "" : " (" + why + ")"));
#endif
  const ModelConfig& m = model.decoder().config();
  if (m.moe.enabled())
    throw LoadError(fmt::format("--tensor-parallel-size {}: mixture-of-experts models are not split yet", n));
  decoder_shard(m.num_heads, m.num_kv_heads, m.intermediate_size, m.vocab_size, TensorParallel{0, n, nullptr});
  if (c.kv_dtype == DType::F8_E4M3)
    throw LoadError(fmt::format("--tensor-parallel-size {}: --kv-cache-dtype fp8 is not split yet", n));
}

}  // namespace

std::unique_ptr<StepBackend> make_step_backend(const EngineConfig& c, const Model& model,
                                               std::vector<int32_t> eos_token_ids, int64_t max_model_len) {
  const LlmDecoder& decoder = model.decoder();
  if (c.block_size < 1 || c.block_size > 1024) throw LoadError(fmt::format("engine config: block size {}", c.block_size));
  Device device = c.device;
  std::string why;
  // The GPU kernels' shape limits, checked on the host before any GPU is opened: --device cuda
  // refuses the model naming them; --device auto falls back to the CPU with a warning.
  const std::vector<std::string> problems =
      device == Device::Cpu ? std::vector<std::string>{}
                            : cuda_model_support(decoder.config(), c, c.dtype.value_or(decoder.config().dtype),
                                                 max_model_len, model.vision_head_dim());
  if (device == Device::Cuda && !problems.empty()) throw LoadError(cuda_support_message(problems));
  if (device == Device::Auto) {
    device = cuda_available(&why) ? Device::Cuda : Device::Cpu;
    if (device == Device::Cuda && !problems.empty()) {
      VLM_LOG_WARN("--device auto: running on the CPU, not the GPU: {}", cuda_support_message(problems));
      device = Device::Cpu;
    }
  } else if (device == Device::Cuda && !cuda_available(&why)) {
    throw LoadError("--device cuda: " + why);
  }
  check_tensor_parallel(c, model, device);
  std::unique_ptr<StepBackend> backend;
  if (device == Device::Cpu && c.quantize_fp8)
    throw LoadError(std::string("--quantization fp8 runs on the GPU (--device cuda; here: ") +
                    (c.device == Device::Auto ? "--device auto chose the CPU" : "--device cpu") +
                    "); the CPU computes FP8 checkpoints dequantized, without the flag");
  if (device == Device::Cpu && c.kv_dtype == DType::F8_E4M3)
    throw LoadError(std::string("--kv-cache-dtype fp8 runs on the GPU (--device cuda; here: ") +
                    (c.device == Device::Auto ? "--device auto chose the CPU" : "--device cpu") +
                    "); the CPU's KV cache is f32, bf16 or f16");
  if (device == Device::Cpu) {
    const ModelConfig& m = decoder.config();
    KVCacheShape s;
    s.num_layers = m.num_layers;
    s.block_size = c.block_size;
    s.num_kv_heads = static_cast<int>(m.num_kv_heads);
    s.head_dim = static_cast<int>(m.head_dim);
    s.dtype = c.kv_dtype;
    s.num_blocks = c.num_kv_blocks > 0
                       ? c.num_kv_blocks
                       : static_cast<int64_t>(c.kv_cache_memory_gib * 1024.0 * 1024.0 * 1024.0) / s.bytes_per_block();
    check_holds_one_sequence(s.num_blocks, s.block_size, s.bytes_per_block(), max_model_len, c.max_model_len > 0);
    backend = std::make_unique<CpuBackend>(decoder, s, std::move(eos_token_ids));
    VLM_LOG_INFO("engine: --dtype {} ({} weights) -> {}", c.dtype ? dtype_name(*c.dtype) : "auto",
                 dtype_name(decoder.weight_dtype()), apply_cpu_dtype(resolve_dtype(c.dtype, decoder.weight_dtype())));
  } else {
#if VLM_HAVE_CUDA
    backend = make_cuda_backend(c, model, std::move(eos_token_ids));
    check_holds_one_sequence(backend->num_kv_blocks(), c.block_size, backend->kv_bytes_per_block(), max_model_len,
                             c.max_model_len > 0);
#endif
  }
  VLM_LOG_INFO("engine: device {}", backend->device());
  if (c.debug_fail_step > 0) {
    VLM_LOG_WARN("engine: --debug-fail-step {}: forward {} will fail as a broken device would (tests only)",
                 c.debug_fail_step, c.debug_fail_step);
    backend = std::make_unique<FaultInjectionBackend>(std::move(backend), c.debug_fail_step);
  }
  return backend;
}

}  // namespace vlm

// EngineConfig: the knobs of one engine (the server's --flags map onto these).
#pragma once

#include <cstdint>
#include <optional>

#include "engine/scheduling/scheduler.h"
#include "kernels/core/dtype.h"
#include "kernels/kv_compression/look_m_params.h"
#include "kernels/sink_router/sink_router_config.h"
#include "kernels/sparse_prefill/sparse_prefill_config.h"

namespace vlm {

// Where the model runs (vLLM's --device): Auto is cuda when the build has the CUDA backend and a
// GPU is visible, else cpu.
enum class Device { Auto, Cpu, Cuda };

// The GPU's token budget of a step that runs no decode when vlm-server's
// --prefill-only-batched-tokens is auto (its default; SchedulerConfig::prefill_only_batched_tokens,
// StepBackend::prefill_only_batched_tokens_auto): a long prompt prefilled alone runs 8192-token
// chunks instead of --max-num-batched-tokens ones (issue 38: a 98K-token video's dense TTFT, the
// decoder's GEMMs at 2048 rows well below their 8K-row rate). The one place to change it.
inline constexpr int kCudaPrefillOnlyBatchedTokens = 8192;

struct EngineConfig {
  Device device = Device::Auto;
  // Model dtype (vLLM's --dtype): weights and activations; unset = auto (the checkpoint's). On
  // the GPU it is also the KV cache's dtype (F32 is the exact path: f32 GEMMs without TF32).
  // On the CPU (engine/compute_dtype.h) BF16 runs bf16-rounded activations where the CPU has
  // AVX512-BF16 and F32 is the exact path; applied process-wide when the engine is built.
  std::optional<DType> dtype;
  // GPU: the fraction of the GPU's memory this engine may use; the KV cache takes what the
  // weights and activations leave (num_kv_blocks > 0 overrides it). The CPU ignores it.
  double gpu_memory_utilization = 0.9;
  // GPU: encoder rows (patches; LLaVA: image tokens) one vision-encoder call may hold; their
  // activations are reserved inside gpu_memory_utilization before the KV cache (the default fits
  // a 64-frame 448x448 video of Qwen2-VL: 32768 patches). A step's media beyond it encode in
  // several calls; a video beyond it on a tower that splits frames (Qwen2-VL) in whole-frame
  // groups of at most this (so the processor's longest video, 768 frames, is taken); an item
  // whose single frame (LLaVA: the image) is beyond it is refused with a 400.
  int64_t max_media_patches = 32768;
  // GPU: a step's media of more patches than this (a long video) is encoded in groups of whole
  // frames of at most this many patches, each when a prefill chunk first needs its rows, so that
  // one step's encode stalls the other sequences' decode for about one group, not the whole video
  // (8192: one 2048-token chunk of Qwen2-VL); a bigger prefill-only step (SchedulerConfig::
  // prefill_only_batched_tokens) encodes every unit its chunk reads, in that step (no decode
  // waits on it). -1 (default): 4 * scheduler.max_num_batched_tokens
  // (a chunk's worth under a 2x2 merge; on the H200 a 98K-token video's step gaps for a running
  // stream went from p99 1203 ms to 325 ms with the methods' TTFT unchanged, bench/RESULTS.md);
  // 0: a step's media are encoded whole.
  int64_t media_step_patches = -1;
  // Tensor parallelism (vLLM's --tensor-parallel-size, issue 42): the decoder split over GPUs
  // 0..N-1 (engine/cuda/cuda_backend.h). N > 1 needs --device cuda, N visible GPUs, NCCL, shapes
  // that split (model/layers/tensor_parallel.h), no server-wide sparse prefill or SinkRouter, and
  // for LOOK-M KV heads that split over the ranks (refused at start, make_step_backend).
  int tensor_parallel_size = 1;
  // GPU, under tensor parallelism (issue 42; vLLM's --mm-encoder-tp-mode): the devices the vision
  // encoder runs on. 0 (default; vLLM's "data"): every rank's device, a tower on each, a step's
  // media split over them and the rows gathered to every rank (CudaMediaEncoder::make with the
  // ranks' devices); n in 1..N: the first n ranks' devices (1: the first rank's alone, its rows
  // copied to the others). One device without tensor parallelism whatever the value.
  // --mm-encoder-devices N (vlm-server, vlm-generate).
  int mm_encoder_devices = 0;
  // GPU: run decode steps eagerly, without CUDA graphs (vLLM's --enforce-eager).
  bool enforce_eager = false;
  // GPU: --quantization fp8 (vLLM's): the decoder's linear layers quantized to FP8 E4M3 at load
  // (per-channel weight scales, per-token activation scales; the vision tower and LM head stay
  // 16-bit); needs --dtype bfloat16 (or auto on a bf16 checkpoint) and a Hopper GPU (sm_90).
  // Off by default; the CPU refuses it. FP8 checkpoints need no flag (CudaDecoderOptions).
  bool quantize_fp8 = false;
  // KV cache: num_kv_blocks when > 0, else as many blocks as fit in kv_cache_memory_gib.
  int block_size = 16;               // B, tokens per block
  int64_t num_kv_blocks = 0;
  double kv_cache_memory_gib = 1.0;
  DType kv_dtype = DType::BF16;      // F32 (exact), BF16 or F16 (half the bytes); F8_E4M3: the GPU's FP8 cache
                                     // (--kv-cache-dtype fp8; the GPU's other values keep the model dtype)
  // Longest sequence (prompt + output); 0: the model's max_position_embeddings. The KV cache
  // must hold at least one sequence this long (checked at start).
  int64_t max_model_len = 0;
  SchedulerConfig scheduler;
  // Sparse prefill, server-wide default (method Off: exact dense prefill); requests may
  // override the method (SamplingParams::sparse_prefill).
  SparsePrefillConfig sparse_prefill;
  // Automatic prefix caching (BlockManager): on by default, as in vLLM's V1 engine
  // (--enable-prefix-caching / --no-enable-prefix-caching).
  bool enable_prefix_caching = true;
  // Run Scheduler::check_integrity() after every step (tests; costs O(blocks) per step).
  bool check_integrity_every_step = false;
  // LOOK-M KV compression at the end of prefill (default off); requests may override it.
  LookMSetting look_m;
  // SinkRouter decode routing (approximate; ALGORITHMS.md §8): the default for requests that do
  // not set SamplingParams::sink_router, and its knobs.
  bool sink_router = false;
  SinkRouterConfig sink_router_config;
  // Tests only (vlm-server --debug-fail-step N): the backend's forward number N (1-based) and
  // every later one throw a DeviceError, as a failed GPU would (FaultInjectionBackend). 0: off.
  int64_t debug_fail_step = 0;
};

// Time spent in each stage of Engine::step(), in seconds.
struct StepTimings {
  double schedule_s = 0;
  double run_s = 0;
  double sample_s = 0;
  double postprocess_s = 0;
  double total_s() const { return schedule_s + run_s + sample_s + postprocess_s; }
  StepTimings& operator+=(const StepTimings& o) {
    schedule_s += o.schedule_s;
    run_s += o.run_s;
    sample_s += o.sample_s;
    postprocess_s += o.postprocess_s;
    return *this;
  }
};

// Gauges and counters of one engine, for /metrics (vLLM names in comments).
struct EngineStats {
  // Gauges, as of the end of the latest step.
  int num_requests = 0;           // live requests
  int num_waiting_seqs = 0;       // vllm:num_requests_waiting (sequences)
  int num_running_seqs = 0;       // vllm:num_requests_running (sequences)
  int64_t num_kv_blocks = 0;
  int64_t num_free_kv_blocks = 0;
  double kv_usage = 0;            // vllm:kv_cache_usage_perc (0-1)
  // Counters since start.
  int64_t num_steps = 0;
  int64_t num_preemptions = 0;        // vllm:num_preemptions_total
  int64_t num_prompt_tokens = 0;      // vllm:prompt_tokens_total (of admitted requests)
  int64_t num_generation_tokens = 0;  // vllm:generation_tokens_total
  int64_t num_computed_prefill_tokens = 0;  // prefill tokens run, recomputation included
  int64_t num_requests_finished[5] = {};    // by FinishReason (None unused)
  int64_t num_requests_rejected = 0;        // add_request refused (400, 429)
  int64_t num_integrity_failures = 0;       // idle checks that found a problem
  int64_t num_look_m_compressions = 0;      // sequences compressed by LOOK-M
  int64_t look_m_kv_tokens_before = 0;      // their cache tokens before compression
  int64_t look_m_kv_tokens_after = 0;       // and after
  int64_t look_m_kv_blocks_freed = 0;       // blocks returned by the trims
  int64_t look_m_kv_bytes_freed = 0;        // their K+V bytes over all layers
  int64_t sink_groups_routed = 0;           // SinkRouter decode (token, layer, kv group) decisions
  int64_t sink_groups_skipped = 0;          // ... sink groups among them (KV not read)
  int64_t sink_kv_bytes_skipped = 0;        // KV cache bytes those groups did not read
  int64_t prefix_cache_queries = 0;         // vllm:prefix_cache_queries_total (tokens)
  int64_t prefix_cache_hits = 0;            // vllm:prefix_cache_hits_total (tokens)
  int64_t num_cached_kv_blocks = 0;         // gauge: blocks holding a published hash
  int64_t num_media_items_encoded = 0;      // media items run through the encoder
  StepTimings total_time;
  // The latest step.
  StepTimings last_step;
  int64_t last_step_num_tokens = 0;
  int last_step_num_decode_seqs = 0;
  int last_step_num_prefill_seqs = 0;
};

}  // namespace vlm

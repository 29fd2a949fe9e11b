// CudaDecoder: the decoder of an LlmDecoder (Llama / Qwen2 families) on one GPU. It owns a copy
// of the weights in GPU memory (in `dtype`: F32 for the exact path, BF16 or F16) and the paged
// KV cache (same dtype, or FP8 E4M3 with options.kv_fp8; [num_blocks, Hkv, B, D] per layer and K/V,
// the CPU cache's layout), and
// runs a ForwardBatch with one metadata upload, every layer on one stream and no host sync; the
// logits of the batch's logits_indices rows stay on the GPU for the sampler.
// Per layer: h = rms_norm(x); qkv = h Wqkv^T + b (one GEMM); RoPE on q, k; K/V into the cache;
// attention over the cache (kernels/cuda/attention: tensor-core prefill, split-K decode, the
// naive kernel for head sizes those do not cover); x += attn Wo^T (the residual add in the GEMM, x in f32);
// h = rms_norm(x); gu = h [Wgate; Wup]^T; x += (silu(g) * u) Wdown^T. Then the final norm and
// the LM head on the logits rows only. Steps of at most kGemvMaxRows rows in bf16/f16 run the
// linear layers as GEMVs (kernels/cuda/gemm/gemv.h; gate/up with SiLU·mul fused; each RMSNorm
// folded into the GEMV after it, gemv_norm.h, unless options.fused_norm is off), others through
// cuBLASLt.
// Decode steps (every sequence one new token, no embedding override) run as CUDA graphs unless
// options.enforce_eager: one graph per bucket (sequences padded up to 1..4, then multiples of 8
// to 64, then of 32; context up to a power of two >= 256), captured the first time a bucket
// runs (that step runs eagerly, then is captured) and replayed after one upload of the step's
// metadata into the graph's own fixed-layout buffer. Padding sequences have no context, no KV
// slot and no logits row that anyone reads; the decode attention's grid is planned for the
// bucket's context and reads each sequence's length from device memory. At most
// options.max_graphs graphs are kept (least recently used dropped); growing a step buffer
// drops them all (their pointers are baked in).
// Sparse prefill (ForwardBatch::sparse_prefill): CudaSparsePrefill plans the step's sequences
// and runs the block-sparse kernel for every layer's attention (configurations it cannot plan
// throw RequestError; the backend refuses them at start). SinkRouter decode
// (ForwardBatch::sink_anchors, cuda_sink_router_step.h) and LOOK-M at the end of prefill
// (ForwardBatch::look_m, cuda_look_m_step.h) run on the GPU. SinkRouter decode steps take graphs
// like dense ones (their key adds the routing config; the routed flags and the stores' anchor
// pointers ride in the metadata); steps that carry LOOK-M states, or that finish a prefill with a
// SinkRouter store (its anchors are captured then), run eagerly. ForwardBatch::attention_probe
// (the CPU's f32 host probe) throws InternalError here; the GPU's probe is set_attention_probe.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kernels/cuda/core/device_buffer.h"
#include "kernels/cuda/gemm/cublaslt_gemm.h"
#include "kernels/cuda/attention/cuda_attention.h"
#include "model/decoder/llm_decoder.h"
#include "model/layers/cuda/cuda_cudnn_prefill.h"
#include "model/layers/cuda/cuda_layers.h"
#include "model/layers/cuda/cuda_look_m_step.h"
#include "model/layers/cuda/cuda_sink_router_step.h"
#include "model/layers/cuda/cuda_sparse_prefill.h"
#include "model/layers/cuda/cuda_step.h"
#include "model/layers/cuda/step_profiler.h"

namespace vlm {

struct CudaDecoderOptions {
  DType dtype = DType::BF16;            // weights, activations and KV cache: F32, BF16 or F16
  int block_size = 16;                  // B
  int64_t num_kv_blocks = 0;            // > 0: exactly this many; else sized by memory_utilization
  double gpu_memory_utilization = 0.9;  // fraction of the GPU's memory this process may use
  int64_t max_tokens_per_step = 8192;   // activations reserved before sizing the KV cache
  int64_t max_logit_rows = 256;         // logits rows reserved (sampling rows per step)
  // Model::embedding_planes(): above 1 (Qwen3-VL's DeepStack), the step's media planes scratch
  // ([rows, planes * hidden] f32) is reserved with the activations for max_tokens_per_step rows,
  // before the KV cache is sized (a prefill-only step of 8192 rows: 512 MiB for Qwen3-VL-8B).
  int64_t media_planes = 1;
  int device = 0;
  bool enforce_eager = false;           // no CUDA graphs (vLLM's --enforce-eager)
  int max_graphs = 48;                  // decode graphs kept
  // Dense prefill through cuDNN (cuda_cudnn_prefill.h): -1 = VLM_CUDA_PREFILL_CUDNN (unset: on),
  // 0 off, 1 on; chunks of at least cudnn_min_tokens rows, plans per cudnn_bucket-row length
  // bucket; chunks over cached context up to max_model_len tokens (0: the model's
  // max_position_embeddings) through a K/V scratch reserved with the activations.
  int cudnn_prefill = -1;
  int cudnn_min_tokens = 1024;
  int cudnn_bucket = 1024;
  int64_t max_model_len = 0;
  // RMSNorm folded into the GEMV that reads it on steps of few rows (kernels/cuda/gemm/gemv_norm.h:
  // input norm -> q/k/v, post-attention norm -> gate/up, final norm -> LM head; the same logits
  // bit for bit at hidden sizes <= 4096): -1 = VLM_CUDA_DECODE_FUSED_NORM (unset: on), 0 off, 1 on.
  int fused_norm = -1;
  // Decode attention's split reduce merged into its split kernel (the last CTA of each sequence
  // and KV head merges; cuda_attention.h): -1 = VLM_CUDA_DECODE_FUSED_REDUCE (unset: on), 0 off, 1 on.
  int fused_decode_reduce = -1;
  // Short-context decode in one launch (kernels/cuda/attention/decode_short.h: q/k norm, RoPE, the
  // K/V write and attention fused) on decode steps of <= 4 sequences and <= 8K context with a 16-bit
  // cache, no SinkRouter/LOOK-M/probe: -1 = VLM_CUDA_DECODE_SHORT (unset: on), 0 off, 1 on.
  int decode_short = -1;
  // Programmatic dependent launch of the decode step's kernels (kernels/cuda/core/pdl.h: each starts
  // beside the one before it and prefetches its weights before waiting; graphs and eager steps; the
  // same logits bit for bit): -1 = VLM_CUDA_PDL (unset: off), 0 off, 1 on; on only where the GPU
  // and the build support it (Hopper or later), and never while VLM_CUDA_PROFILE times the ops.
  int pdl = -1;
  // FP8 linear layers (issue 43, model/layers/cuda/cuda_fp8_linear.h): quantize_fp8 (vLLM's
  // --quantization fp8) quantizes every decoder linear layer but the LM head at load (per-channel
  // weight scales, per-token activation scales; dtype must be BF16). Without it, an FP8 checkpoint's
  // FP8 layers stay FP8 when dtype is BF16, and are dequantized to dtype otherwise (F32: exact
  // w.r.t. the stored values). Either FP8 path refuses a GPU other than Hopper at start, naming it
  // (require_fp8_gpu: below compute capability 8.9 no FP8 tensor cores; Ada/Blackwell not yet).
  bool quantize_fp8 = false;
  // FP8 KV cache (issue 43, vLLM's --kv-cache-dtype fp8): the cache in F8_E4M3 (half the bytes of
  // bf16 per block, so twice the blocks for a memory budget) with static per-layer, per-head
  // scales (model/decoder/kv_cache_scales.h: the checkpoint's k_scale/v_scale, else 1.0). dtype
  // must be BF16 or F16, a Hopper GPU (require_fp8_gpu). Attention reads it through the mma.sync
  // prefill and split-K decode kernels (cuda_attention.h) and SinkRouter (cuda_sink_router.h);
  // cuDNN prefill is off. Sparse prefill's block-sparse kernel and its grid / vertical-slash /
  // boundary estimates and LOOK-M's end of prefill (scores, merge, compaction re-quantized with the
  // same static scales) read FP8 too; XAttention heads do not (refused at start: cuda_model_support;
  // a request asking for them: 400; the estimate itself throws InternalError on an FP8 cache).
  bool kv_fp8 = false;
  // Tensor parallelism (issue 42): this decoder is rank tp.rank of tp.size (its shard of the
  // weights, model/arch/llama_decoder.h, and a KV cache of its KV heads) on GPU `device`; the
  // all-reduces go through tp.comm (an NcclCommunicator of that device) on this decoder's stream,
  // inside its decode graphs. Every rank runs every forward() with the same batch (CudaBackend's
  // rank threads). Sparse prefill plans the rank's heads by the model's heads' patterns and
  // SinkRouter routes the rank's KV groups (cuda_sparse_prefill.h, cuda_sink_router_step.h). Under TP the FP8 KV cache and quantize_fp8 are refused (LoadError); an FP8
  // checkpoint's weights are dequantized to dtype.
  TensorParallel tp;
};

// The runner of the decoder's architecture (model/arch/llama_decoder.h) over the GPU's layers
// (model/layers/cuda/): it owns the KV cache, the step's metadata and activations, the decode
// graphs, and the attention with its methods (CudaAttentionRunner: the layers' attention calls it).
class CudaDecoder final : private CudaAttentionRunner {
 public:
  // Uploads the host decoder's weights (converted to options.dtype; progress in the log) and
  // allocates the KV cache. Throws LoadError when the GPU lacks the memory for the weights or
  // for one block of cache, InternalError on a CUDA failure.
  CudaDecoder(const LlmDecoder& host, const CudaDecoderOptions& options);
  ~CudaDecoder();
  CudaDecoder(const CudaDecoder&) = delete;
  CudaDecoder& operator=(const CudaDecoder&) = delete;

  // The config this decoder runs: the model's, with this rank's query heads, KV heads and MLP
  // columns under tensor parallelism (the vocabulary, hidden size and layers are the model's).
  const ModelConfig& config() const { return cfg_; }
  DType dtype() const { return opt_.dtype; }
  DType kv_dtype() const { return opt_.kv_fp8 ? DType::F8_E4M3 : opt_.dtype; }  // the cache's
  int block_size() const { return opt_.block_size; }
  int64_t num_kv_blocks() const { return num_blocks_; }
  int64_t kv_bytes_per_block() const;  // K + V over all layers
  int64_t weight_bytes() const { return weight_bytes_; }
  cudaStream_t stream() const { return stream_; }

  // Copies block src's K and V to dst in every layer (copy-on-write), on the stream.
  void copy_block(int32_t src, int32_t dst);

  // Runs the batch (enqueued; returns before the GPU finishes). Preconditions as
  // LlmDecoder::forward (token ids < V are checked on the host). After it, logits() holds
  // [num_logit_rows(), V] f32 on the device until the next forward.
  void forward(const ForwardBatch& batch, const EmbeddingOverride& override = {});
  const float* logits() const { return logits_.as<float>(); }
  int64_t num_logit_rows() const { return num_logit_rows_; }
  // Waits for the stream and copies the logits to the host as [rows, V] (tests, tools).
  void download_logits(std::vector<float>& out) const;
  // After the stream synchronized (the caller's sync): the last forward's method counters
  // (SinkRouter's skipped groups) into the batch's stores and counters.
  void settle_methods() { sink_.settle(); }
  // Counts of the last forward not yet in the batch's stores: SinkRouter's (settle_methods() adds
  // them) or sparse prefill's (a host function on the stream adds them).
  bool methods_pending() const { return sink_.pending() || sparse_prefill_.counts_in_flight(); }
  // Tensor parallelism, after every rank's forward() returned (CudaBackend, one thread): the grid
  // layouts this rank searched go into the sequences' stores (CudaSparsePrefill::commit_layouts).
  void commit_rank_step() { sparse_prefill_.commit_layouts(); }
  // Optional probe (tools: vlm-search-patterns --device cuda): called by every layer's attention
  // after the step's K/V are in the cache and before attention runs, with q[T, H, D] post-RoPE
  // (device, dtype()), the layer's cache, the step's device metadata, the scale and the stream
  // (enqueued work so far is ordered before what the probe enqueues; it may synchronize). Steps
  // run eagerly while a probe is set. Empty: none.
  using AttentionProbe = std::function<void(int layer, const void* q /*[T,H,D]*/, int num_heads,
                                            const PagedKVLayer& kv, const cuda::CudaAttentionBatch& meta,
                                            float scale, cudaStream_t stream)>;
  void set_attention_probe(AttentionProbe probe) { probe_ = std::move(probe); }
  // Decode graphs captured so far, and graph launches (tests, benchmarks).
  int64_t graphs_captured() const { return graphs_captured_; }
  bool pdl() const { return pdl_; }  // options.pdl resolved (decode steps launch with PDL)
  int64_t graph_launches() const { return graph_launches_; }
  // Layers enqueued through the fused short-context decode (decode_short.h; eager steps and graph
  // captures count, graph replays do not; tests).
  int64_t decode_short_layers() const { return decode_short_layers_; }
  // Layers whose prefill attention ran through cuDNN (tests).
  int64_t cudnn_prefill_calls() const { return cudnn_.calls(); }
  int64_t cudnn_paged_calls() const { return cudnn_.paged_calls(); }  // of those, chunks over cached context

 private:
  struct Graph;
  void allocate_cache();
  void reserve_activations(int64_t T, int64_t R);
  int64_t upload_metadata(const ForwardBatch& b);  // returns the number of sequences
  // The step's work after the metadata upload: the architecture's forward (RoPE table, embedding
  // with the override, layers, head), then the methods' end of step.
  void run_step(int64_t T, int64_t R, const cuda::CudaAttentionBatch& meta, const EmbeddingOverride& override);
  // CudaAttentionRunner: RoPE, K/V into layer l's cache, attention with the step's methods.
  Act attend(int l, Act qkv, const RopeRows& rope, const cuda::HeadNorm& norm) override;
  // [q/k norm,] RoPE of the fused q/k/v projection into q_, k and v into layer l's cache slots
  // (one kernel where rope_kv_write_supported, the norm fused in where rope_kv_write_norm_supported;
  // else -- and on cuDNN prefill steps, which read k_/v_ -- head_rms_norm in place on qkv,
  // rope_split_qkv into k_/v_ and paged_kv_write).
  void rope_kv_write(int l, int64_t T, void* qkv, const RopeRows& rope, const cuda::HeadNorm& norm);
  void attention(int l, int64_t T, const cuda::CudaAttentionBatch& meta);
  // The fused short-context decode (decode_short.h) for this layer when the step qualifies (a
  // decode step with no method, probe, sparse or cuDNN attention; decode_short_supported); false:
  // nothing enqueued, take rope_kv_write then attention.
  bool attend_short(int l, int64_t T, void* qkv, const RopeRows& rope, const cuda::HeadNorm& norm);
  // The tensor-core kernels' head sizes; the split-K decode kernel for this step.
  bool fast_attention() const { return config().head_dim == 64 || config().head_dim == 128; }
  bool decode_shape() const { return fast_attention() && config().num_heads / config().num_kv_heads <= 16; }
  bool decode_kernel() const { return decode_shape() && all_decode_; }
  // cuda_decoder_graphs.cpp: runs b as a graph when it qualifies; false: run it eagerly.
  bool forward_graph(const ForwardBatch& b, const EmbeddingOverride& override);
  void drop_graphs();

  // Makes this decoder's device current (under TP, each rank's thread calls in; else a no-op).
  void bind() const;

  const LlmDecoder& host_;
  CudaDecoderOptions opt_;
  ModelConfig cfg_;  // config(): the rank's shapes
  // options.device made current before the members below allocate (cuBLASLt's workspace).
  bool device_current_ = false;
  bool fused_norm_ = true;    // options.fused_norm resolved
  bool fused_reduce_ = true;  // options.fused_decode_reduce resolved
  bool decode_short_ = true;  // options.decode_short resolved
  bool pdl_ = false;          // options.pdl resolved
  cudaStream_t stream_ = nullptr;
  cuda::CublasLtGemm gemm_;
  StepProfiler prof_;  // VLM_CUDA_PROFILE=1: per-op GPU time of each forward on stderr
  std::unique_ptr<CudaLayers> layers_;   // the GPU's layers (they hold the weights)
  std::unique_ptr<LlamaDecoder> arch_;   // the forward, written once
  int64_t weight_bytes_ = 0;
  // KV cache: one allocation, layer l's K at kv_[l * 2], V at kv_[l * 2 + 1] blocks.
  cuda::DeviceBuffer kv_;
  int64_t num_blocks_ = 0;
  std::vector<PagedKVLayer> kv_layers_;  // device pointers
  cuda::DeviceBuffer kv_scales_;         // FP8 cache: f32 [L, 2, Hkv] (K's, then V's heads per layer)
  // Step buffers (grown on demand).
  cuda::PinnedBuffer meta_host_;
  cuda::DeviceBuffer meta_dev_;
  std::vector<cuda::DeviceBuffer> acts_;  // the architecture's plan, by index
  cuda::DeviceBuffer q_, k_, v_, attn_, logits_, decode_ws_;  // attention's (with cuDNN's slack rows), logits
  cuda::DeviceBuffer decode_counters_;  // [num_seqs, Hkv] int32, zero between launches (fused_reduce_)
  bool all_decode_ = false;  // every sequence of the step has one row
  const ForwardBatch* batch_ = nullptr;  // the step's batch while forward() runs
  bool sparse_ = false;                  // some sequence of the step prefills sparsely
  CudaSparsePrefill sparse_prefill_;
  CudaCudnnPrefill cudnn_;
  CudaCudnnPrefill::Mode cudnn_mode_ = CudaCudnnPrefill::kNone;  // this step's cuDNN attention (cuda_cudnn_prefill.h)
  CudaSinkRouterStep sink_;
  CudaLookMStep look_m_;
  AttentionProbe probe_;
  bool methods_ = false;  // the step carries LOOK-M states or SinkRouter stores
  bool look_m_on_ = false;  // the step carries LOOK-M states (runs eagerly)
  bool kv_replicated_ = false;  // TP with fewer KV heads than ranks (SinkRouter refused)
  int64_t cap_tokens_ = 0, cap_rows_ = 0;
  int64_t buffers_epoch_ = 0;  // bumped when a step buffer is reallocated (graphs hold pointers)
  CudaScratch scratch_{&buffers_epoch_};  // the layers' scratch
  CudaStep step_;                         // the layers' view of the step being run
  const cuda::CudaAttentionBatch* meta_ = nullptr;  // the step's, while run_step runs
  std::vector<std::unique_ptr<Graph>> graphs_;
  cuda::PinnedBuffer graph_host_;   // staging of a graph step's metadata
  cudaEvent_t graph_staged_ = nullptr;  // the staging's last upload done
  int64_t graph_clock_ = 0, graphs_captured_ = 0, graph_launches_ = 0, decode_short_layers_ = 0;
  int64_t num_logit_rows_ = 0;
  // Device views into meta_dev_ for the current step.
  const int32_t* d_ids_ = nullptr;
  const int32_t* d_pos_ = nullptr;
  const int32_t* d_mrope_ = nullptr;
  const int32_t* d_slots_ = nullptr;
  const int32_t* d_cu_ = nullptr;
  const int32_t* d_ctx_ = nullptr;
  const int32_t* d_tables_ = nullptr;
  const int32_t* d_rows_ = nullptr;
};

}  // namespace vlm

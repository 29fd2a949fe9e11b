#include "model/decoder/cuda/cuda_decoder.h"

#include "model/decoder/cuda/decode_graph.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "kernels/core/check.h"
#include "kernels/core/env_switch.h"
#include "kernels/core/log.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/device_upload.h"
#include "kernels/cuda/attention/decode_short.h"
#include "kernels/cuda/core/pdl.h"
#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/gemm/gemv_norm.h"
#include "kernels/cuda/ops/ops_cuda.h"
#include "model/layers/cuda/cuda_fp8_linear.h"
#include "kernels/ops/rope.h"
#include "model/decoder/kv_cache_scales.h"

namespace vlm {

namespace {

// VLM_CUDA_DECODE_FUSED_NORM / VLM_CUDA_DECODE_FUSED_REDUCE (unset: on), each read once per process.
bool fused_norm_env() {
  static const bool on = env_switch("VLM_CUDA_DECODE_FUSED_NORM", true);
  return on;
}
bool fused_reduce_env() {
  static const bool on = env_switch("VLM_CUDA_DECODE_FUSED_REDUCE", true);
  return on;
}

}  // namespace

CudaDecoder::CudaDecoder(const LlmDecoder& host, const CudaDecoderOptions& options)
    : host_(host),
      opt_(options),
      cfg_(host.config()),
      device_current_(cudaSetDevice(options.device) == cudaSuccess),
      fused_norm_(options.fused_norm < 0 ? fused_norm_env() : options.fused_norm != 0),
      fused_reduce_(options.fused_decode_reduce < 0 ? fused_reduce_env() : options.fused_decode_reduce != 0),
      decode_short_(options.decode_short < 0 ? cuda::decode_short_env() : options.decode_short != 0),
      cudnn_(options.kv_fp8 ? 0 : options.cudnn_prefill, options.cudnn_min_tokens, options.cudnn_bucket) {
  VLM_CHECK(opt_.dtype == DType::F32 || opt_.dtype == DType::BF16 || opt_.dtype == DType::F16,
            "GPU dtype {} (F32, BF16 or F16)", dtype_name(opt_.dtype));
  VLM_CUDA_CHECK(cudaSetDevice(opt_.device));
  if (opt_.tp.enabled()) {  // this rank's shapes; the architecture checks them again and splits the weights
    const ModelConfig& m = host.config();
    const DecoderShard sh = decoder_shard(m.num_heads, m.num_kv_heads, m.intermediate_size, m.vocab_size, opt_.tp);
    cfg_.num_heads = sh.heads;
    cfg_.num_kv_heads = sh.kv_heads;
    cfg_.intermediate_size = sh.inner;
    // The methods read per-head settings by the model's heads: MMInference's patterns by query
    // head; SinkRouter routes this rank's KV groups with its own anchors.
    sparse_prefill_.set_heads(static_cast<int>(sh.head_begin), static_cast<int>(m.num_heads));
    sink_.set_rank(opt_.tp.rank, opt_.tp.size);
    kv_replicated_ = m.num_kv_heads % opt_.tp.size != 0;
    if (opt_.kv_fp8)  // FP8 weights split like bf16 ones (cuda_fp8_linear.h); the FP8 cache does not yet
      throw LoadError(fmt::format("--kv-cache-dtype fp8 with tensor parallelism ({} GPUs) is not supported yet", opt_.tp.size));
  }
  pdl_ = (options.pdl < 0 ? cuda::pdl_env() : options.pdl != 0) && cuda::pdl_supported(opt_.device) && !prof_.on();
  VLM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  VLM_CUDA_CHECK(cudaEventCreateWithFlags(&graph_staged_, cudaEventDisableTiming));
  const ModelConfig& c = config();
  VLM_CHECK(c.head_dim <= 256, "head_dim {} > 256 on the GPU", c.head_dim);
  VLM_LOG_INFO("GPU: {}; loading {} layers as {}", cuda::describe_gpu(opt_.device), c.num_layers,
               dtype_name(opt_.dtype));
  const WeightQuantization& stored = host_.weights().quantization();
  const bool stored_fp8 = stored.scales != Fp8Scales::None && opt_.dtype == DType::BF16;
  if (opt_.quantize_fp8 || stored_fp8) {
    require_fp8_gpu(opt_.device, opt_.quantize_fp8 ? std::string("--quantization fp8")
                                                   : "the checkpoint's " + stored.describe() + " weights");
    VLM_LOG_INFO("GPU: FP8 linear layers ({})", opt_.quantize_fp8 ? "quantized at load, per-channel scales"
                                                                  : stored.describe() + ", per-channel on the GPU");
  }
  if (opt_.kv_fp8) {
    VLM_CHECK(opt_.dtype != DType::F32, "an FP8 KV cache under the f32 exact path");
    require_fp8_gpu(opt_.device, "--kv-cache-dtype fp8");
  }
  layers_ = std::make_unique<CudaLayers>(opt_.dtype, opt_.quantize_fp8 ? CudaFp8::kAll
                                                     : stored_fp8     ? CudaFp8::kStored
                                                                      : CudaFp8::kNone);
  arch_ = std::make_unique<LlamaDecoder>(host_.config(), *layers_, host_.weights(), host_.names(), opt_.tp);
  weight_bytes_ = layers_->weight_bytes();
  VLM_LOG_INFO("GPU: loaded {} layers ({:.2f} GiB)", c.num_layers, static_cast<double>(weight_bytes_) / (1 << 30));
  allocate_cache();
}

CudaDecoder::~CudaDecoder() {
  if (opt_.tp.enabled()) cudaSetDevice(opt_.device);
  if (stream_) cudaStreamSynchronize(stream_);
  graphs_.clear();
  if (graph_staged_) cudaEventDestroy(graph_staged_);
  if (stream_) cudaStreamDestroy(stream_);
}

int64_t CudaDecoder::kv_bytes_per_block() const {
  const ModelConfig& c = config();
  return 2 * c.num_layers * c.num_kv_heads * opt_.block_size * c.head_dim * static_cast<int64_t>(dtype_size(kv_dtype()));
}

void CudaDecoder::allocate_cache() {
  const ModelConfig& c = config();
  reserve_activations(opt_.max_tokens_per_step, opt_.max_logit_rows);
  VLM_CUDA_CHECK(cudaDeviceSynchronize());
  size_t free_b = 0, total_b = 0;
  VLM_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const int64_t per_block = kv_bytes_per_block();
  if (opt_.num_kv_blocks > 0) {
    num_blocks_ = opt_.num_kv_blocks;
  } else {
    // Budget: utilization * total, minus what is in use now (weights, activations, cuBLAS, and
    // other processes), minus a margin for the CUDA context's later growth (graphs, kernels).
    const double budget = opt_.gpu_memory_utilization * static_cast<double>(total_b) -
                          static_cast<double>(total_b - free_b) - 256.0 * (1 << 20);
    num_blocks_ = budget > 0 ? static_cast<int64_t>(budget / static_cast<double>(per_block)) : 0;
  }
  if (num_blocks_ < 1)
    throw LoadError(fmt::format("GPU: no memory left for the KV cache ({:.2f} of {:.2f} GiB free after {:.2f} GiB of "
                                "weights, --gpu-memory-utilization {})",
                                static_cast<double>(free_b) / (1 << 30), static_cast<double>(total_b) / (1 << 30),
                                static_cast<double>(weight_bytes_) / (1 << 30), opt_.gpu_memory_utilization));
  kv_.resize(static_cast<size_t>(num_blocks_ * per_block));
  VLM_CUDA_CHECK(cudaMemsetAsync(kv_.get(), 0, kv_.bytes(), stream_));
  const int64_t layer_bytes = num_blocks_ * per_block / (2 * c.num_layers);
  const float* scales = nullptr;  // FP8: [L, 2, Hkv]
  if (opt_.kv_fp8) {
    const KvCacheScales ks = kv_cache_scales(host_.weights(), host_.names().prefix, c.num_layers, c.num_kv_heads);
    std::vector<float> host(static_cast<size_t>(2 * c.num_layers * c.num_kv_heads));
    for (int64_t l = 0; l < c.num_layers; ++l)
      for (int64_t h = 0; h < c.num_kv_heads; ++h) {
        host[static_cast<size_t>((2 * l) * c.num_kv_heads + h)] = ks.k[static_cast<size_t>(l * c.num_kv_heads + h)];
        host[static_cast<size_t>((2 * l + 1) * c.num_kv_heads + h)] = ks.v[static_cast<size_t>(l * c.num_kv_heads + h)];
      }
    kv_scales_.resize(host.size() * sizeof(float));
    VLM_CUDA_CHECK(cudaMemcpy(kv_scales_.get(), host.data(), kv_scales_.bytes(), cudaMemcpyHostToDevice));
    scales = kv_scales_.as<float>();
    VLM_LOG_INFO("GPU: FP8 KV cache, scales per layer and KV head: {} of {} layers from the checkpoint's "
                 "k_scale/v_scale, the rest 1.0",
                 ks.layers_from_checkpoint, c.num_layers);
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    PagedKVLayer v;
    v.k = kv_.as<char>() + (2 * l) * layer_bytes;
    v.v = kv_.as<char>() + (2 * l + 1) * layer_bytes;
    v.dtype = kv_dtype();
    if (scales) {
      v.k_scale = scales + (2 * l) * c.num_kv_heads;
      v.v_scale = scales + (2 * l + 1) * c.num_kv_heads;
    }
    v.num_blocks = num_blocks_;
    v.block_size = opt_.block_size;
    v.num_kv_heads = static_cast<int>(c.num_kv_heads);
    v.head_dim = static_cast<int>(c.head_dim);
    kv_layers_.push_back(v);
  }
  VLM_LOG_INFO("GPU: KV cache {} blocks of {} tokens ({} tokens, {:.2f} GiB {}), weights {:.2f} GiB", num_blocks_,
               opt_.block_size, num_blocks_ * opt_.block_size, static_cast<double>(kv_.bytes()) / (1 << 30),
               dtype_name(kv_dtype()), static_cast<double>(weight_bytes_) / (1 << 30));
}

void CudaDecoder::bind() const {
  if (opt_.tp.enabled()) VLM_CUDA_CHECK(cudaSetDevice(opt_.device));
}

void CudaDecoder::copy_block(int32_t src, int32_t dst) {
  bind();
  const int64_t layer_block = kv_bytes_per_block() / (2 * config().num_layers);
  for (const PagedKVLayer& v : kv_layers_)
    for (void* base : {v.k, v.v})
      VLM_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(base) + dst * layer_block,
                                     static_cast<char*>(base) + src * layer_block, static_cast<size_t>(layer_block),
                                     cudaMemcpyDeviceToDevice, stream_));
}

void CudaDecoder::reserve_activations(int64_t T, int64_t R) {
  if (T <= cap_tokens_ && R <= cap_rows_) return;
  T = std::max(T, cap_tokens_);
  R = std::max(R, cap_rows_);
  VLM_CUDA_CHECK(cudaStreamSynchronize(stream_));  // buffers in use by the previous step
  const ModelConfig& c = config();
  const auto e = static_cast<int64_t>(dtype_size(opt_.dtype));
  const int64_t QD = c.num_heads * c.head_dim, KD = c.num_kv_heads * c.head_dim;
  const ActivationPlan& plan = arch_->plan();
  acts_.resize(plan.bufs.size());
  for (size_t i = 0; i < plan.bufs.size(); ++i) {  // the architecture's activations
    const ActivationPlan::Buf& b = plan.bufs[i];
    const int64_t rows = b.logit_rows ? R : T, esz = b.role == ActRole::Hidden ? e : 4;
    acts_[i].resize(static_cast<size_t>(std::max<int64_t>(rows, 1) * b.cols * esz));
  }
  // cuDNN prefill: its K/V scratch (once), and the rows it pads sequences with past T (cuda_cudnn_prefill.h).
  const int64_t Tq = T + cudnn_.reserve(c, opt_.max_model_len, opt_.dtype);
  q_.resize(static_cast<size_t>(Tq * QD * e));
  k_.resize(static_cast<size_t>(Tq * KD * e));
  v_.resize(static_cast<size_t>(Tq * KD * e));
  attn_.resize(static_cast<size_t>(Tq * QD * e));
  logits_.resize(static_cast<size_t>(R * c.vocab_size * 4));
  // The layers' scratch at its size for T rows now, before the KV cache takes the free memory
  // (they would grow it on first use otherwise): normed rows, SiLU·mul rows, the RoPE table.
  const int64_t half = static_cast<int64_t>(RotaryEmbedding(c.rope).inv_freq().size());
  scratch_.get(CudaScratch::kNormOut, std::max(T, R) * c.hidden_size * e, stream_);
  scratch_.get(CudaScratch::kAct, T * c.intermediate_size * e, stream_);
  scratch_.get(CudaScratch::kRopeTable, T * 2 * half * 4, stream_);
  if (opt_.media_planes > 1)  // DeepStack media rows: [T, planes * C] f32, then [T] int32 (cuda_media_rows.cpp)
    scratch_.get(CudaScratch::kMediaPlanes, T * (opt_.media_planes * c.hidden_size * 4 + 4), stream_);
  ++buffers_epoch_;
  cap_tokens_ = T;
  cap_rows_ = R;
}

int64_t CudaDecoder::upload_metadata(const ForwardBatch& b) {
  const int64_t T = b.num_tokens(), S = b.num_seqs(), R = static_cast<int64_t>(b.logits_indices.size());
  const bool mrope = !b.mrope_positions.empty();
  VLM_CHECK(static_cast<int64_t>(b.cu_seqlens_q.size()) == S + 1, "cu_seqlens of {} for {} sequences",
            b.cu_seqlens_q.size(), S);
  VLM_CHECK(static_cast<int64_t>(b.block_tables.size()) == S * b.max_blocks_per_seq, "block tables");
  if (mrope) VLM_CHECK(static_cast<int64_t>(b.mrope_positions.size()) == 3 * T, "M-RoPE positions");
  const int64_t V = config().vocab_size;
  for (int64_t t = 0; t < T; ++t)
    VLM_CHECK(b.token_ids[t] >= 0 && b.token_ids[t] < V, "token id {} at row {} outside the vocabulary of {}",
              b.token_ids[t], t, V);
  for (int64_t r = 0; r < R; ++r)
    VLM_CHECK(b.logits_indices[r] >= 0 && b.logits_indices[r] < T, "logits index {} outside the batch of {}",
              b.logits_indices[r], T);
  // One pinned buffer, one copy: ids, pos, mrope, slots, cu, ctx, tables, rows.
  const int64_t sizes[] = {T, T, mrope ? 3 * T : 0, T, S + 1, S, S * b.max_blocks_per_seq, R};
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  meta_host_.reserve(static_cast<size_t>(total) * 4);
  meta_dev_.reserve(static_cast<size_t>(total) * 4);
  int32_t* hp = meta_host_.as<int32_t>();
  const int32_t* dp = meta_dev_.as<int32_t>();
  const int32_t* views[8];
  const int32_t* srcs[] = {b.token_ids.data(), b.positions.data(), b.mrope_positions.data(), b.slot_mapping.data(),
                           b.cu_seqlens_q.data(), b.context_lens.data(), b.block_tables.data(),
                           b.logits_indices.data()};
  int64_t off = 0;
  for (int i = 0; i < 8; ++i) {
    if (sizes[i]) std::memcpy(hp + off, srcs[i], static_cast<size_t>(sizes[i]) * 4);
    views[i] = dp + off;
    off += sizes[i];
  }
  VLM_CUDA_CHECK(cudaMemcpyAsync(meta_dev_.get(), hp, static_cast<size_t>(total) * 4, cudaMemcpyHostToDevice, stream_));
  d_ids_ = views[0];
  d_pos_ = views[1];
  d_mrope_ = mrope ? views[2] : nullptr;
  d_slots_ = views[3];
  d_cu_ = views[4];
  d_ctx_ = views[5];
  d_tables_ = views[6];
  d_rows_ = views[7];
  return S;
}

void CudaDecoder::forward(const ForwardBatch& b, const EmbeddingOverride& override) {
  const int64_t T = b.num_tokens(), R = static_cast<int64_t>(b.logits_indices.size());
  VLM_CHECK(T > 0, "empty batch");
  bind();
  VLM_CHECK(static_cast<int64_t>(b.positions.size()) == T && static_cast<int64_t>(b.slot_mapping.size()) == T,
            "batch arrays disagree on the token count {}", T);
  VLM_CHECK(!b.attention_probe, "attention probes do not run on the GPU yet");
  // LOOK-M steps run eagerly (their per-step uploads are not in a graph's layout); SinkRouter
  // decode steps take graphs (forward_graph).
  look_m_on_ = std::any_of(b.look_m.begin(), b.look_m.end(), [](auto* p) { return p != nullptr; });
  const bool sink = std::any_of(b.sink_anchors.begin(), b.sink_anchors.end(), [](auto* p) { return p != nullptr; });
  methods_ = look_m_on_ || sink;
  VLM_CHECK(!(kv_replicated_ && sink),
            "SinkRouter over replicated KV heads under tensor parallelism (a group's query heads on several ranks)");
  sparse_ = CudaSparsePrefill::active(b);
  sparse_prefill_.begin_step();
  cudnn_mode_ = sparse_ ? CudaCudnnPrefill::kNone : cudnn_.plan_step(b, config(), opt_.dtype);
  // batch_ stays set until forward() returns: forward_graph runs the step twice (eagerly, then
  // under stream capture), and each run_step reads it.
  struct BatchScope {
    const ForwardBatch*& p;
    ~BatchScope() { p = nullptr; }
  } scope{batch_};
  batch_ = &b;
  reserve_activations(T, R);
  // Steps that capture SinkRouter anchors (a prefill finishing) run eagerly too.
  if (!probe_ && !look_m_on_ && !CudaSinkRouterStep::captures(b) && forward_graph(b, override)) {
    if (methods_) sink_.end(stream_);
    return;
  }
  prof_.begin(stream_);  // eager steps only (a no-op unless VLM_CUDA_PROFILE=1)
  const int64_t S = upload_metadata(b);
  cuda::CudaAttentionBatch meta;
  meta.num_seqs = static_cast<int>(S);
  meta.cu_seqlens_q = d_cu_;
  meta.context_lens = d_ctx_;
  meta.block_tables = d_tables_;
  meta.max_blocks_per_seq = b.max_blocks_per_seq;
  for (int64_t s = 0; s < S; ++s) {
    meta.max_q_len = std::max(meta.max_q_len, b.cu_seqlens_q[s + 1] - b.cu_seqlens_q[s]);
    meta.max_context_len = std::max(meta.max_context_len, b.context_lens[s]);
  }
  const ModelConfig& c = config();
  if (methods_)
    sink_.begin(b, meta.max_q_len == 1, decode_shape(), static_cast<int>(c.num_layers), static_cast<int>(c.num_kv_heads),
                static_cast<int>(c.head_dim), kv_dtype(), stream_);
  run_step(T, R, meta, override);
  if (methods_) sink_.end(stream_);
}

void CudaDecoder::run_step(int64_t T, int64_t R, const cuda::CudaAttentionBatch& meta,
                           const EmbeddingOverride& override) {
  const ModelConfig& c = config();
  all_decode_ = meta.max_q_len == 1;
  if (all_decode_) {
    const size_t need = cuda::paged_decode_workspace_bytes(meta.num_seqs, static_cast<int>(c.num_heads),
                                                           static_cast<int>(c.num_kv_heads),
                                                           static_cast<int>(c.head_dim), meta.max_context_len);
    if (need > decode_ws_.bytes()) {
      VLM_CUDA_CHECK(cudaStreamSynchronize(stream_));  // a graph in flight may use it
      decode_ws_.reserve(need);
      ++buffers_epoch_;
    }
    const size_t counters = static_cast<size_t>(meta.num_seqs) * static_cast<size_t>(c.num_kv_heads) * 4;
    if (fused_reduce_ && counters > decode_counters_.bytes()) {  // zero once; each launch leaves them zero
      VLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
      decode_counters_.reserve(counters);
      VLM_CUDA_CHECK(cudaMemsetAsync(decode_counters_.get(), 0, decode_counters_.bytes(), stream_));
      ++buffers_epoch_;
    }
  }
  CudaStep& s = step_;
  s.stream = stream_;
  s.dt = opt_.dtype;
  s.T = T;
  s.R = R;
  s.batch = batch_;
  s.override = &override;
  s.ids = d_ids_;
  s.pos = d_pos_;
  s.mrope = d_mrope_;
  s.rows = d_rows_;
  s.fused_norm = fused_norm_;
  s.logits_buf = logits_.as<float>();
  s.gemm = &gemm_;
  s.prof = &prof_;
  s.pool = &scratch_;
  s.attention = this;
  const ActivationPlan& plan = arch_->plan();
  s.acts.resize(plan.bufs.size());
  for (size_t i = 0; i < plan.bufs.size(); ++i) {
    const ActivationPlan::Buf& b = plan.bufs[i];
    s.acts[i] = Act{acts_[i].get(), b.logit_rows ? R : T, b.cols, b.role == ActRole::Hidden ? opt_.dtype : DType::F32};
  }
  meta_ = &meta;
  {
    const cuda::PdlScope pdl(pdl_ && all_decode_);  // decode steps' kernels with PDL (pdl.h)
    arch_->forward(s);  // the rope table, the embedding, every layer, the head on the logit rows
  }
  meta_ = nullptr;
  if (sparse_) sparse_prefill_.finish_step(stream_);  // the step's block counts, when the stream gets there
  if (methods_) sink_.capture(*batch_, kv_layers_, d_tables_, stream_);  // SinkRouter's anchors of finished
  if (look_m_on_)  // prompts, then LOOK-M's compaction (this rank's KV heads)
    look_m_.finish(*batch_, kv_layers_, d_tables_, stream_, opt_.tp.rank, opt_.tp.size);
  num_logit_rows_ = R;
  prof_.end(stream_, T);
}

void CudaDecoder::download_logits(std::vector<float>& out) const {
  bind();
  out.resize(static_cast<size_t>(num_logit_rows_ * config().vocab_size));
  VLM_CUDA_CHECK(cudaMemcpyAsync(out.data(), logits_.get(), out.size() * 4, cudaMemcpyDeviceToHost, stream_));
  VLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace vlm

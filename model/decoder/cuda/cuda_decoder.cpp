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
#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/gemm/gemv_norm.h"
#include "kernels/cuda/ops/ops_cuda.h"
#include "kernels/ops/rope.h"

namespace vlm {

struct CudaDecoder::Layer {
  cuda::DeviceBuffer input_norm, post_norm;  // [C] f32
  cuda::DeviceBuffer qkv, o, gate_up, down;  // [QD + 2 KD, C], [C, QD], [2I, C], [C, I] dt
  cuda::DeviceBuffer qkv_bias, gate_up_bias;  // dt, or empty
  cuda::DeviceBuffer o_bias, down_bias;       // f32, or empty
};

namespace {

bool present(const TensorView& t) { return !t.empty(); }

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
      fused_norm_(options.fused_norm < 0 ? fused_norm_env() : options.fused_norm != 0),
      fused_reduce_(options.fused_decode_reduce < 0 ? fused_reduce_env() : options.fused_decode_reduce != 0),
      cudnn_(options.cudnn_prefill, options.cudnn_min_tokens, options.cudnn_bucket) {
  VLM_CHECK(opt_.dtype == DType::F32 || opt_.dtype == DType::BF16 || opt_.dtype == DType::F16,
            "GPU dtype {} (F32, BF16 or F16)", dtype_name(opt_.dtype));
  VLM_CUDA_CHECK(cudaSetDevice(opt_.device));
  VLM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  VLM_CUDA_CHECK(cudaEventCreateWithFlags(&graph_staged_, cudaEventDisableTiming));
  const ModelConfig& c = config();
  VLM_CHECK(c.head_dim <= 256, "head_dim {} > 256 on the GPU", c.head_dim);
  RotaryEmbedding rope(c.rope);
  rope_half_ = static_cast<int>(rope.inv_freq().size());
  rope_scaling_ = rope.attention_scaling();
  if (!c.rope.mrope_section.empty()) {
    VLM_CHECK(c.rope.mrope_section.size() == 3, "mrope_section of {} entries", c.rope.mrope_section.size());
    mrope_sec0_ = c.rope.mrope_section[0];
    mrope_sec1_ = c.rope.mrope_section[1];
  }
  inv_freq_.resize(sizeof(float) * rope.inv_freq().size());
  VLM_CUDA_CHECK(cudaMemcpy(inv_freq_.get(), rope.inv_freq().data(), inv_freq_.bytes(), cudaMemcpyHostToDevice));
  upload_weights();
  allocate_cache();
}

CudaDecoder::~CudaDecoder() {
  if (stream_) cudaStreamSynchronize(stream_);
  graphs_.clear();
  if (graph_staged_) cudaEventDestroy(graph_staged_);
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaDecoder::upload_weights() {
  const ModelConfig& c = config();
  const DType dt = opt_.dtype;
  VLM_LOG_INFO("GPU: {}; loading {} layers as {}", cuda::describe_gpu(opt_.device), c.num_layers, dtype_name(dt));
  int64_t bytes = 0;
  embed_ = cuda::upload_converted({host_.embed_weight()}, dt, &bytes);
  final_norm_ = cuda::upload_converted({host_.final_norm_weight()}, DType::F32, &bytes);
  lm_head_tied_ = host_.lm_head_weight().data == host_.embed_weight().data;
  if (!lm_head_tied_) lm_head_ = cuda::upload_converted({host_.lm_head_weight()}, dt, &bytes);
  int last_pct = -1;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const DecoderLayerWeights& L = host_.layer_weights(l);
    auto layer = std::make_unique<Layer>();
    layer->input_norm = cuda::upload_converted({L.input_norm}, DType::F32, &bytes);
    layer->post_norm = cuda::upload_converted({L.post_norm}, DType::F32, &bytes);
    layer->qkv = cuda::upload_converted({L.q, L.k, L.v}, dt, &bytes);
    layer->o = cuda::upload_converted({L.o}, dt, &bytes);
    layer->gate_up = cuda::upload_converted({L.gate, L.up}, dt, &bytes);
    layer->down = cuda::upload_converted({L.down}, dt, &bytes);
    if (present(L.q_bias)) layer->qkv_bias = cuda::upload_converted({L.q_bias, L.k_bias, L.v_bias}, dt, &bytes);
    if (present(L.gate_bias)) layer->gate_up_bias = cuda::upload_converted({L.gate_bias, L.up_bias}, dt, &bytes);
    if (present(L.o_bias)) layer->o_bias = cuda::upload_converted({L.o_bias}, DType::F32, &bytes);
    if (present(L.down_bias)) layer->down_bias = cuda::upload_converted({L.down_bias}, DType::F32, &bytes);
    layers_.push_back(std::move(layer));
    const int pct = static_cast<int>(100 * (l + 1) / c.num_layers);
    if (pct / 10 != last_pct / 10 || l + 1 == c.num_layers) {
      VLM_LOG_INFO("GPU: loaded layer {}/{} ({:.2f} GiB)", l + 1, c.num_layers, static_cast<double>(bytes) / (1 << 30));
      last_pct = pct;
    }
  }
  weight_bytes_ = bytes;
}

int64_t CudaDecoder::kv_bytes_per_block() const {
  const ModelConfig& c = config();
  return 2 * c.num_layers * c.num_kv_heads * opt_.block_size * c.head_dim * static_cast<int64_t>(dtype_size(opt_.dtype));
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
  for (int64_t l = 0; l < c.num_layers; ++l) {
    PagedKVLayer v;
    v.k = kv_.as<char>() + (2 * l) * layer_bytes;
    v.v = kv_.as<char>() + (2 * l + 1) * layer_bytes;
    v.dtype = opt_.dtype;
    v.num_blocks = num_blocks_;
    v.block_size = opt_.block_size;
    v.num_kv_heads = static_cast<int>(c.num_kv_heads);
    v.head_dim = static_cast<int>(c.head_dim);
    kv_layers_.push_back(v);
  }
  VLM_LOG_INFO("GPU: KV cache {} blocks of {} tokens ({} tokens, {:.2f} GiB {}), weights {:.2f} GiB", num_blocks_,
               opt_.block_size, num_blocks_ * opt_.block_size, static_cast<double>(kv_.bytes()) / (1 << 30),
               dtype_name(opt_.dtype), static_cast<double>(weight_bytes_) / (1 << 30));
}

void CudaDecoder::copy_block(int32_t src, int32_t dst) {
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
  const int64_t C = c.hidden_size, I = c.intermediate_size, QD = c.num_heads * c.head_dim,
                KD = c.num_kv_heads * c.head_dim;
  x_.resize(static_cast<size_t>(T * C * 4));
  h_.resize(static_cast<size_t>(T * C * e));
  qkv_.resize(static_cast<size_t>(T * (QD + 2 * KD) * e));
  // cuDNN prefill: its K/V scratch (once), and the rows it pads sequences with past T (cuda_cudnn_prefill.h).
  const int64_t Tq = T + cudnn_.reserve(c, opt_.max_model_len, opt_.dtype);
  q_.resize(static_cast<size_t>(Tq * QD * e));
  k_.resize(static_cast<size_t>(Tq * KD * e));
  v_.resize(static_cast<size_t>(Tq * KD * e));
  attn_.resize(static_cast<size_t>(Tq * QD * e));
  gu_.resize(static_cast<size_t>(T * 2 * I * e));
  act_.resize(static_cast<size_t>(T * I * e));
  rope_table_.resize(static_cast<size_t>(T * 2 * rope_half_ * 4));
  sel_.resize(static_cast<size_t>(R * C * e));
  logits_.resize(static_cast<size_t>(R * c.vocab_size * 4));
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

void CudaDecoder::embed(int64_t T, const EmbeddingOverride& override) {
  const int64_t C = config().hidden_size;
  cuda::embedding(embed_.get(), opt_.dtype, d_ids_, T, C, x_.as<float>(), stream_);
  for (int64_t i = 0; i < override.num_device_runs; ++i) {  // media rows encoded on this GPU
    const DeviceRowRun& r = override.device_runs[i];
    VLM_CHECK(r.row >= 0 && r.n >= 0 && r.row + r.n <= T, "device embedding run [{}, +{}) of {} rows", r.row, r.n, T);
    VLM_CUDA_CHECK(cudaMemcpyAsync(x_.as<float>() + r.row * C, r.src, static_cast<size_t>(r.n * C) * 4,
                                   cudaMemcpyDeviceToDevice, stream_));
  }
  if (override.use == nullptr) return;
  VLM_CHECK(override.embeds != nullptr, "embedding override without embeddings");
  // Media rows: copy each run of overridden rows (media steps only; pageable host memory).
  for (int64_t t = 0; t < T;) {
    if (!override.use[t]) {
      ++t;
      continue;
    }
    int64_t e = t;
    while (e < T && override.use[e]) ++e;
    VLM_CUDA_CHECK(cudaMemcpyAsync(x_.as<float>() + t * C, override.embeds + t * C,
                                   static_cast<size_t>((e - t) * C) * 4, cudaMemcpyHostToDevice, stream_));
    t = e;
  }
}

void CudaDecoder::attention(int l, int64_t T, const cuda::CudaAttentionBatch& meta) {
  const ModelConfig& c = config();
  const PagedKVLayer& kv = kv_layers_[static_cast<size_t>(l)];
  const int H = static_cast<int>(c.num_heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (probe_) probe_(l, q_.get(), H, kv, meta, scale, stream_);
  auto builtin = [&](cuda::CudaAttentionBatch m) {  // our kernels (all rows, or cuDNN's leftover ranges)
    if (decode_kernel() && methods_) sink_.route_layer(l, q_.get(), opt_.dtype, H, kv, m, stream_);  // group skips
    if (decode_kernel())
      cuda::paged_decode_attention(q_.get(), opt_.dtype, H, kv, m, scale, attn_.get(), decode_ws_.get(), stream_,
                                   fused_reduce_ ? decode_counters_.as<int32_t>() : nullptr);
    else if (fast_attention())
      cuda::paged_prefill_attention(q_.get(), opt_.dtype, H, kv, m, scale, attn_.get(), stream_);
    else
      cuda::paged_attention_naive(q_.get(), opt_.dtype, H, kv, m, scale, attn_.get(), stream_);
  };
  if (sparse_) {
    VLM_CHECK(fast_attention() && kv.dtype != DType::F32, "sparse prefill on the GPU needs D 64/128 and a bf16/f16 cache");
    sparse_prefill_.attention(l, *batch_, q_.get(), opt_.dtype, H, kv, meta, scale, attn_.get(), stream_, &prof_);
  } else if (!cudnn_.attention(cudnn_mode_, *batch_, meta, kv, q_.get(), k_.get(), v_.get(), attn_.get(), T, H,
                                opt_.dtype, scale, stream_, builtin)) {  // kNone: false
    builtin(meta);
  }
  if (look_m_on_) look_m_.layer(l, q_.get(), opt_.dtype, H, kv, *batch_, d_tables_, scale, stream_);
  prof_.mark(stream_, "attention");
}

void CudaDecoder::rope_kv_write(int l, int64_t T) {
  const ModelConfig& c = config();
  const PagedKVLayer& kv = kv_layers_[static_cast<size_t>(l)];
  const int64_t R = 2 * rope_half_;
  if (!CudaCudnnPrefill::uses_kv_rows(cudnn_mode_) && cuda::rope_kv_write_supported(kv, opt_.dtype, R)) {  // one pass
    cuda::rope_split_q_kv_write(qkv_.get(), T, c.num_heads, rope_table_.as<float>(), R, q_.get(), kv, d_slots_,
                                opt_.dtype, stream_);
    prof_.mark(stream_, "rope_kv_write");
    return;
  }
  cuda::rope_split_qkv(qkv_.get(), T, c.num_heads, c.num_kv_heads, c.head_dim, rope_table_.as<float>(), R, q_.get(),
                       k_.get(), v_.get(), opt_.dtype, stream_);
  prof_.mark(stream_, "rope");
  cuda::paged_kv_write(kv, k_.get(), v_.get(), opt_.dtype, d_slots_, T, stream_);
  prof_.mark(stream_, "kv_write");
}

void CudaDecoder::run_layer(int l, int64_t T, const cuda::CudaAttentionBatch& meta) {
  const ModelConfig& c = config();
  const Layer& L = *layers_[static_cast<size_t>(l)];
  const DType dt = opt_.dtype;
  const int64_t C = c.hidden_size, I = c.intermediate_size, H = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim;
  const int64_t QD = H * D, W = QD + 2 * Hkv * D;
  const float eps = static_cast<float>(c.rms_norm_eps);
  // Decode rows: each norm folded into the GEMV that reads it (gemv_norm.h; h_ is not written).
  const bool fuse = fused_norm_ && cuda::gemv_norm_supported(T, C, dt);
  if (fuse) {
    cuda::gemv_norm(x_.as<float>(), nullptr, L.input_norm.as<float>(), eps, L.qkv.get(), dt, L.qkv_bias.get(),
                    qkv_.get(), dt, false, T, W, C, stream_);
  } else {
    cuda::rms_norm(x_.as<float>(), nullptr, L.input_norm.as<float>(), eps, nullptr, T, C, h_.get(), dt, stream_);
    prof_.mark(stream_, "norm");
    linear(h_.get(), L.qkv.get(), L.qkv_bias.get(), qkv_.get(), dt, false, T, W, C);
  }
  prof_.mark(stream_, "gemm_qkv");
  rope_kv_write(l, T);
  attention(l, T, meta);
  linear(attn_.get(), L.o.get(), L.o_bias.get(), x_.get(), DType::F32, true, T, C, QD);
  prof_.mark(stream_, "gemm_o");
  if (fuse) {  // post-attention norm, gate/up and SiLU·mul in one pass
    cuda::gemv_silu_mul_norm(x_.as<float>(), nullptr, L.post_norm.as<float>(), eps, L.gate_up.get(), dt,
                             L.gate_up_bias.get(), act_.get(), T, I, C, stream_);
  } else {
    cuda::rms_norm(x_.as<float>(), nullptr, L.post_norm.as<float>(), eps, nullptr, T, C, h_.get(), dt, stream_);
    prof_.mark(stream_, "norm");
    if (cuda::gemv_supported(T, C, dt)) {  // gate/up and SiLU·mul in one pass
      cuda::gemv_silu_mul(h_.get(), L.gate_up.get(), dt, L.gate_up_bias.get(), act_.get(), T, I, C, stream_);
    } else {
      gemm_.linear(h_.get(), L.gate_up.get(), dt, L.gate_up_bias.get(), gu_.get(), dt, 0.0f, T, 2 * I, C, stream_);
      prof_.mark(stream_, "gemm_gate_up");
      cuda::silu_mul(gu_.get(), T, I, act_.get(), dt, stream_);
    }
  }
  prof_.mark(stream_, "silu_mul");
  linear(act_.get(), L.down.get(), L.down_bias.get(), x_.get(), DType::F32, true, T, C, I);
  prof_.mark(stream_, "gemm_down");
}

void CudaDecoder::linear(const void* x, const void* w, const void* bias, void* y, DType out_dt, bool accumulate,
                         int64_t M, int64_t N, int64_t K) {
  if (cuda::gemv_supported(M, K, opt_.dtype))
    cuda::gemv(x, w, opt_.dtype, bias, y, out_dt, accumulate, M, N, K, stream_);
  else
    gemm_.linear(x, w, opt_.dtype, bias, y, out_dt, accumulate ? 1.0f : 0.0f, M, N, K, stream_);
}

void CudaDecoder::forward(const ForwardBatch& b, const EmbeddingOverride& override) {
  const int64_t T = b.num_tokens(), R = static_cast<int64_t>(b.logits_indices.size());
  VLM_CHECK(T > 0, "empty batch");
  VLM_CHECK(static_cast<int64_t>(b.positions.size()) == T && static_cast<int64_t>(b.slot_mapping.size()) == T,
            "batch arrays disagree on the token count {}", T);
  VLM_CHECK(!b.attention_probe, "attention probes do not run on the GPU yet");
  // LOOK-M steps run eagerly (their per-step uploads are not in a graph's layout); SinkRouter
  // decode steps take graphs (forward_graph).
  look_m_on_ = std::any_of(b.look_m.begin(), b.look_m.end(), [](auto* p) { return p != nullptr; });
  methods_ = look_m_on_ ||
             std::any_of(b.sink_anchors.begin(), b.sink_anchors.end(), [](auto* p) { return p != nullptr; });
  sparse_ = CudaSparsePrefill::active(b);
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
                static_cast<int>(c.head_dim), opt_.dtype, stream_);
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
  cuda::rope_table(d_pos_, d_mrope_, mrope_sec0_, mrope_sec1_, inv_freq_.as<float>(), rope_half_, rope_scaling_, T,
                   rope_table_.as<float>(), stream_);
  embed(T, override);
  prof_.mark(stream_, "upload_embed_rope_table");
  for (int l = 0; l < static_cast<int>(c.num_layers); ++l) run_layer(l, T, meta);
  if (sparse_) sparse_prefill_.finish_step(stream_);  // the step's block counts, when the stream gets there
  if (methods_) sink_.capture(*batch_, kv_layers_, d_tables_, stream_);     // SinkRouter's anchors of finished
  if (look_m_on_) look_m_.finish(*batch_, kv_layers_, d_tables_, stream_);  // prompts, then LOOK-M's compaction
  num_logit_rows_ = R;
  if (R == 0) return prof_.end(stream_, T);
  const DType dt = opt_.dtype;
  const void* head = lm_head_tied_ ? embed_.get() : lm_head_.get();
  const auto eps = static_cast<float>(c.rms_norm_eps);
  if (fused_norm_ && cuda::gemv_norm_supported(R, c.hidden_size, dt)) {  // final norm of the rows in the LM head's GEMV
    cuda::gemv_norm(x_.as<float>(), d_rows_, final_norm_.as<float>(), eps, head, dt, nullptr, logits_.get(), DType::F32,
                    false, R, c.vocab_size, c.hidden_size, stream_);
  } else {
    cuda::rms_norm(x_.as<float>(), nullptr, final_norm_.as<float>(), eps, d_rows_, R, c.hidden_size, sel_.get(), dt,
                   stream_);
    linear(sel_.get(), head, nullptr, logits_.get(), DType::F32, false, R, c.vocab_size, c.hidden_size);
  }
  prof_.mark(stream_, "lm_head");
  prof_.end(stream_, T);
}

void CudaDecoder::download_logits(std::vector<float>& out) const {
  out.resize(static_cast<size_t>(num_logit_rows_ * config().vocab_size));
  VLM_CUDA_CHECK(cudaMemcpyAsync(out.data(), logits_.get(), out.size() * 4, cudaMemcpyDeviceToHost, stream_));
  VLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace vlm

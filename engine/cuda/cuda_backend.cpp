#include "engine/cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <numeric>

#include <fmt/format.h>

#include "engine/backends/cuda_model_support.h"
#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"
#include "model/methods/look_m_state.h"

namespace vlm {

namespace {

CudaDecoderOptions rank0_options(CudaDecoderOptions o, const CudaRankGroup* ranks) {
  if (ranks != nullptr) {
    o.device = 0;
    o.tp = ranks->rank(0);
  }
  return o;
}

}  // namespace

// One TP encode: per_rank[r] the rows on rank r's GPU (valid in rank r's stream order); this
// object is rank 0's rows (data, rows), ensure_rows makes a lazy unit valid on every rank.
struct CudaBackend::RankRows : DeviceEmbeddings {
  std::vector<std::shared_ptr<const DeviceEmbeddings>> per_rank;  // [N]
  void ensure_rows(int64_t begin, int64_t end) const override { per_rank[0]->ensure_rows(begin, end); }
};

CudaBackend::CudaBackend(const LlmDecoder& decoder, const CudaDecoderOptions& options,
                         std::vector<int32_t> eos_token_ids, std::unique_ptr<CudaMediaEncoder> media,
                         std::unique_ptr<CudaRankGroup> ranks)
    : device_(ranks != nullptr ? 0 : options.device),  // before ranks_ takes `ranks`
      media_(std::move(media)),
      ranks_(std::move(ranks)),
      gpu_(decoder, rank0_options(options, ranks_.get())),
      eos_token_ids_(eos_token_ids),
      model_kv_heads_(decoder.config().num_kv_heads),
      host_sampler_(decoder.config().vocab_size, std::move(eos_token_ids)) {
  VLM_CUDA_CHECK(cudaSetDevice(device_));  // (the decoder's constructor left it current)
  if (ranks_) {
    VLM_CHECK(media_ == nullptr || media_->data_parallel() != nullptr,
              "a one-device media encoder under tensor parallelism (its rows would be on GPU 0 only)");
    ranks_->build(decoder, rank0_options(options, ranks_.get()), gpu_.num_kv_blocks());  // restores device_
    kv_heads_split_ = decoder.config().num_kv_heads % ranks_->size() == 0;
  } else {
    VLM_CHECK(media_ == nullptr || media_->data_parallel() != nullptr || media_->tower().device() == device_,
              "the media encoder's tower is on GPU {}, the decoder on GPU {}", media_ ? media_->tower().device() : -1,
              device_);
  }
  const auto V = static_cast<size_t>(decoder.config().vocab_size);
  counts_.assign(V, 0);
  seen_.assign(V, 0);
}

CudaBackend::~CudaBackend() {
  restore_.mark();         // the caller's device, back once the members below are freed
  cudaSetDevice(device_);  // rank 0's (its decoder, the ranks' and the encoder's set their own)
}

std::string CudaBackend::device() const {
  if (ranks_)
    return fmt::format("cuda:0..{} ({} x {}, tensor parallel), {}", ranks_->size() - 1, ranks_->size(), cuda::describe_gpu(0),
                       dtype_name(gpu_.dtype()));
  return fmt::format("cuda:{} ({}), {}", 0, cuda::describe_gpu(0), dtype_name(gpu_.dtype()));
}

void CudaBackend::copy_block(int32_t src, int32_t dst) {
  const cuda::CudaDeviceGuard on(device_);
  gpu_.copy_block(src, dst);
  if (ranks_)
    for (int r = 1; r < ranks_->size(); ++r) ranks_->decoder(r).copy_block(src, dst);  // each binds its GPU
}

std::shared_ptr<const DeviceEmbeddings> CudaBackend::encode_media(std::span<const MediaPixels* const> items,
                                                                  std::vector<std::shared_ptr<const void>> owners) {
  const cuda::CudaDeviceGuard on(device_);
  if (!ranks_) return media_->encode(items, std::move(owners), gpu_.stream());
  std::vector<CudaMediaEncoder::Destination> dests;
  dests.push_back({0, gpu_.stream()});
  for (int r = 1; r < ranks_->size(); ++r) dests.push_back({r, ranks_->decoder(r).stream()});
  auto rows = std::make_shared<RankRows>();
  rows->per_rank = media_->encode(items, std::move(owners), dests);
  rows->data = rows->per_rank[0]->data;
  rows->rows = rows->per_rank[0]->rows;
  std::erase_if(rank_rows_, [](const std::weak_ptr<const RankRows>& w) { return w.expired(); });
  rank_rows_.push_back(rows);
  return rows;
}

void CudaBackend::rank_runs(const EmbeddingOverride& ov, std::vector<EmbeddingOverride>& per_rank) {
  const int n = ranks_->size();
  per_rank.assign(static_cast<size_t>(n), ov);
  if (ov.num_device_runs == 0) return;
  const int64_t C = ov.num_planes * gpu_.config().hidden_size;  // floats a row
  runs_.resize(static_cast<size_t>(n));
  std::vector<std::shared_ptr<const RankRows>> live;  // held for the lookups below
  for (const auto& w : rank_rows_)
    if (auto p = w.lock()) live.push_back(std::move(p));
  for (int r = 1; r < n; ++r) runs_[r].assign(ov.device_runs, ov.device_runs + ov.num_device_runs);
  for (int64_t i = 0; i < ov.num_device_runs; ++i) {
    const DeviceRowRun& run = ov.device_runs[i];
    const RankRows* home = nullptr;
    for (const auto& e : live)
      if (run.src >= e->data && run.src + run.n * C <= e->data + e->rows * C) home = e.get();
    VLM_CHECK(home != nullptr, "device media run at row {} ({} rows) is in no encode of this backend", run.row, run.n);
    const int64_t offset = run.src - home->data;  // floats into the encode's rows, the same on every rank
    for (int r = 1; r < n; ++r) runs_[r][static_cast<size_t>(i)].src = home->per_rank[r]->data + offset;
  }
  for (int r = 1; r < n; ++r) per_rank[r].device_runs = runs_[r].data();
}

void CudaBackend::forward(const ForwardBatch& batch, const EmbeddingOverride& override) {
  const cuda::CudaDeviceGuard on(device_);
  if (!ranks_) {
    gpu_.forward(batch, override);
    return;
  }
  std::vector<EmbeddingOverride> per_rank;  // [N] rank r's device runs point at its own rows
  rank_runs(override, per_rank);
  for (LookMState* st : batch.look_m)  // a device score copy per rank (each rank's thread takes its own)
    if (st != nullptr && st->device_scores.size() < static_cast<size_t>(ranks_->size()))
      st->device_scores.resize(static_cast<size_t>(ranks_->size()));
  CudaSinkRouterStep::prepare(batch, ranks_->size());  // anchor sets the ranks capture into
  ranks_->start([this, &batch, &per_rank](CudaDecoder& d) {
    for (int r = 1; r < ranks_->size(); ++r)
      if (&ranks_->decoder(r) == &d) d.forward(batch, per_rank[static_cast<size_t>(r)]);
  });
  std::exception_ptr err;
  try {
    gpu_.forward(batch, override);
  } catch (...) {
    err = std::current_exception();
  }
  ranks_->join();  // the batch and override must outlive every rank's use of them
  if (err) std::rethrow_exception(err);
  gpu_.commit_rank_step();  // the grid layouts each rank searched, into the sequences' stores
  for (int r = 1; r < ranks_->size(); ++r) ranks_->decoder(r).commit_rank_step();
}

void CudaBackend::settle_methods() {
  if (gpu_.methods_pending()) {
    VLM_CUDA_CHECK(cudaStreamSynchronize(gpu_.stream()));  // its counts' copy (a no-op after sample's sync)
    gpu_.settle_methods();
  }
  if (!ranks_) return;
  for (int r = 1; r < ranks_->size(); ++r) {
    CudaDecoder& d = ranks_->decoder(r);
    if (!d.methods_pending()) continue;
    const cuda::CudaDeviceGuard on(r);  // the caller's GPU back after, also on a throw
    VLM_CUDA_CHECK(cudaStreamSynchronize(d.stream()));  // its counts' copy
    d.settle_methods();
  }
}

void CudaBackend::add_job(const SampleTask& task, int num_top) {
  const Sequence& seq = *task.seq;
  const SamplingParams& p = seq.params;
  cuda::SampleJob j;
  j.row = static_cast<int32_t>(task.row);
  j.temperature = p.temperature;
  j.top_k = p.top_k;
  j.top_p = p.top_p;
  j.min_p = p.min_p;
  j.repetition_penalty = p.repetition_penalty;
  j.presence_penalty = p.presence_penalty;
  j.frequency_penalty = p.frequency_penalty;
  j.num_top = num_top;
  // Penalty entries: each distinct token once, with its count in the output.
  j.penalty_begin = static_cast<int32_t>(pen_tok_.size());
  const bool rep = p.repetition_penalty != 1.0f, freq = p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
  if (rep || freq) {
    for (int32_t t : seq.output_ids()) ++counts_[t];
    auto add = [&](int32_t t) {
      if (seen_[t]) return;
      seen_[t] = 1;
      pen_tok_.push_back(t);
      pen_cnt_.push_back(freq ? counts_[t] : 0);
    };
    if (rep) {
      for (int32_t t : seq.token_ids) add(t);
    } else {
      for (int32_t t : seq.output_ids()) add(t);
    }
    for (size_t i = static_cast<size_t>(j.penalty_begin); i < pen_tok_.size(); ++i) seen_[pen_tok_[i]] = 0;
    for (int32_t t : seq.output_ids()) counts_[t] = 0;
  }
  j.penalty_end = static_cast<int32_t>(pen_tok_.size());
  j.mask_begin = static_cast<int32_t>(mask_.size());
  if (seq.num_output_tokens() < p.min_tokens) {
    const int64_t V = gpu_.config().vocab_size;
    for (int32_t t : p.stop_token_ids) mask_.push_back(t);
    if (!p.ignore_eos)
      for (int32_t t : eos_token_ids_)
        if (t >= 0 && t < V) mask_.push_back(t);
  }
  j.mask_end = static_cast<int32_t>(mask_.size());
  if (!p.greedy()) j.u = uniform01(task.seq->rng);  // the one draw of this sample
  jobs_.push_back(j);
}

void CudaBackend::sample(std::span<const SampleTask> tasks, std::vector<SampleResult>& results) {
  const cuda::CudaDeviceGuard on(device_);
  const int64_t V = gpu_.config().vocab_size;
  results.assign(tasks.size(), SampleResult{});
  jobs_.clear();
  pen_tok_.clear();
  pen_cnt_.clear();
  mask_.clear();
  std::vector<size_t> on_gpu, on_host;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const auto& lp = tasks[i].seq->params.logprobs;
    // Structured output and logit_bias are applied by the host sampler (the row comes back).
    const SamplingParams& sp = tasks[i].seq->params;
    if ((lp && (*lp < 0 || *lp > cuda::kMaxTopLogprobs)) || sp.constraint || !sp.logit_bias.empty()) {
      on_host.push_back(i);
      continue;
    }
    on_gpu.push_back(i);
    add_job(tasks[i], lp ? *lp : -1);
  }
  cudaStream_t s = gpu_.stream();
  const int J = static_cast<int>(jobs_.size());
  if (J > 0) {
    // One upload: jobs, penalty tokens, penalty counts, mask tokens.
    const size_t jobs_b = jobs_.size() * sizeof(cuda::SampleJob);
    const size_t P = pen_tok_.size(), M = mask_.size();
    const size_t total = jobs_b + (2 * P + M + 1) * sizeof(int32_t);
    up_host_.reserve(total);
    up_dev_.reserve(total);
    char* h = up_host_.as<char>();
    std::memcpy(h, jobs_.data(), jobs_b);
    auto* ints = reinterpret_cast<int32_t*>(h + jobs_b);
    if (P) std::memcpy(ints, pen_tok_.data(), P * 4);
    if (P) std::memcpy(ints + P, pen_cnt_.data(), P * 4);
    if (M) std::memcpy(ints + 2 * P, mask_.data(), M * 4);
    VLM_CUDA_CHECK(cudaMemcpyAsync(up_dev_.get(), h, total, cudaMemcpyHostToDevice, s));
    const auto* d_ints = reinterpret_cast<const int32_t*>(up_dev_.as<char>() + jobs_b);
    work_.reserve(static_cast<size_t>(J) * static_cast<size_t>(V) * 4);
    out_dev_.reserve(static_cast<size_t>(J) * sizeof(cuda::SampleOut));
    out_host_.reserve(static_cast<size_t>(J) * sizeof(cuda::SampleOut));
    cuda::sample_rows(gpu_.logits(), V, up_dev_.as<cuda::SampleJob>(), J, d_ints, d_ints + P, d_ints + 2 * P,
                      work_.as<float>(), out_dev_.as<cuda::SampleOut>(), s);
    VLM_CUDA_CHECK(cudaMemcpyAsync(out_host_.as<char>(), out_dev_.get(),
                                   static_cast<size_t>(J) * sizeof(cuda::SampleOut), cudaMemcpyDeviceToHost, s));
  }
  VLM_CUDA_CHECK(cudaStreamSynchronize(s));
  settle_methods();  // SinkRouter's skip counts of the step (every rank's), downloaded with the samples
  for (int k = 0; k < J; ++k) {
    const cuda::SampleOut& o = out_host_.as<cuda::SampleOut>()[k];
    SampleResult& r = results[on_gpu[static_cast<size_t>(k)]];
    r.token_id = o.token;
    if (jobs_[static_cast<size_t>(k)].num_top >= 0) {
      TokenLogprobs lp;
      lp.token_id = o.token;
      lp.logprob = o.logprob;
      lp.rank = o.rank;
      for (int i = 0; i < jobs_[static_cast<size_t>(k)].num_top && i < V; ++i)
        lp.top.push_back({o.top_ids[i], o.top_logprobs[i]});
      r.logprobs = std::move(lp);
    }
  }
  for (size_t i : on_host) {
    row_.resize(static_cast<size_t>(V));
    VLM_CUDA_CHECK(cudaMemcpy(row_.data(), gpu_.logits() + tasks[i].row * V, static_cast<size_t>(V) * 4,
                              cudaMemcpyDeviceToHost));
    results[i] = host_sampler_.sample(row_.data(), *tasks[i].seq);
  }
}

bool CudaBackend::runs_sparse_prefill(const SparsePrefillConfig& cfg) const {
  return !cfg.enabled() || (plannable_without_host_data(cfg) && cfg.block == 64 && gpu_.dtype() != DType::F32 &&
                            (gpu_.kv_dtype() != DType::F8_E4M3 || !uses_xattention_heads(cfg)) &&
                            cuda_fast_head_dim(gpu_.config().head_dim));
}

bool CudaBackend::runs_look_m() const {
  const ModelConfig& m = gpu_.config();  // under TP, rank 0's heads (every rank's alike)
  // Each rank selects and compacts its own KV heads (CudaLookMStep): they must be split, not replicated.
  if (ranks_ && m.num_kv_heads * ranks_->size() != model_kv_heads_) return false;
  return m.num_heads / m.num_kv_heads <= kCudaDecodeMaxGroup && m.head_dim <= 256;
}

std::unique_ptr<StepBackend> make_cuda_backend(const EngineConfig& c, const Model& model,
                                               std::vector<int32_t> eos_token_ids) {
  const LlmDecoder& decoder = model.decoder();
  // Sparse prefill runs the configurations the GPU plans (CudaSparsePrefill); LOOK-M and
  // SinkRouter run on the GPU (CudaDecoder: CudaLookMStep, CudaSinkRouterStep).
  CudaDecoderOptions o;
  o.dtype = c.dtype.value_or(decoder.config().dtype);
  // The shapes and methods were checked before (make_step_backend: cuda_model_support).
  o.block_size = c.block_size;
  o.num_kv_blocks = c.num_kv_blocks;
  o.gpu_memory_utilization = c.gpu_memory_utilization;
  o.enforce_eager = c.enforce_eager;
  o.quantize_fp8 = c.quantize_fp8;
  o.kv_fp8 = c.kv_dtype == DType::F8_E4M3;
  // The largest step the scheduler may make: a prefill-only step (prefill_only_batched_tokens, auto
  // resolved as the Engine does) can exceed max_num_batched_tokens; its activations are reserved
  // now, before the KV cache takes the free memory, so a big step never runs out of scratch.
  o.max_tokens_per_step = max_step_tokens(resolve_prefill_only(c.scheduler, kCudaPrefillOnlyBatchedTokens));
  o.max_model_len = c.max_model_len;  // 0: the model's max_position_embeddings (the engine's default too)
  o.max_logit_rows = c.scheduler.max_num_seqs;
  o.media_planes = model.embedding_planes();  // DeepStack planes' scratch reserved with the activations
  // Everything below is built on the GPUs it names; the caller's current device comes back.
  const cuda::CudaDeviceGuard restore;
  std::unique_ptr<CudaMediaEncoder> media;
  const int64_t step_patches =
      c.media_step_patches >= 0 ? c.media_step_patches : 4 * int64_t(c.scheduler.max_num_batched_tokens);
  if (c.tensor_parallel_size > 1) {  // checked before (make_step_backend: GPUs, shapes, methods)
    // The data-parallel encoder over the first mm_encoder_devices ranks' GPUs (0: all), its rows
    // delivered to every rank; built before any rank's KV cache is sized.
    const int n = c.tensor_parallel_size;
    const int m = c.mm_encoder_devices <= 0 ? n : std::min(c.mm_encoder_devices, n);
    std::vector<int> devices(static_cast<size_t>(m));
    std::iota(devices.begin(), devices.end(), 0);
    if (model.has_media()) media = CudaMediaEncoder::make(model, o.dtype, c.max_media_patches, step_patches, devices);
    auto ranks = std::make_unique<CudaRankGroup>(n);
    return std::make_unique<CudaBackend>(decoder, o, std::move(eos_token_ids), std::move(media), std::move(ranks));
  }
  // The tower on the decoder's GPU, whatever device the caller left current (a tensor-parallel
  // engine destroyed earlier on this thread leaves its last rank's: session 17's TP media tests
  // built a TP=1 engine's tower on GPU 1 beside its decoder on GPU 0, then failed with an invalid
  // resource handle).
  VLM_CUDA_CHECK(cudaSetDevice(o.device));
  if (model.has_media()) media = CudaMediaEncoder::make(model, o.dtype, c.max_media_patches, step_patches);
  return std::make_unique<CudaBackend>(decoder, o, std::move(eos_token_ids), std::move(media));
}

}  // namespace vlm

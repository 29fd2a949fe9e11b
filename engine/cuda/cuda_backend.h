// CudaBackend: the StepBackend of one GPU. The CudaDecoder runs the step (weights and KV cache
// in GPU memory); sampling runs on the GPU too (kernels/cuda/sampling/gpu_sampler.h), so only
// token ids and the asked-for logprobs come back: per step one upload of the sampling jobs (with
// each job's penalty tokens, min_tokens mask and the uniform draw taken from the sequence's RNG
// on the host, one draw per non-greedy sample as on the CPU) and one download of the results.
// A request for more than kMaxTopLogprobs top logprobs (or the whole vocabulary) is sampled on
// the host from a copy of its logits row with the CPU Sampler.
// Tensor parallelism (tensor_parallel_size N > 1, issue 42): the decoder is split over GPUs
// 0..N-1; this backend's own CudaDecoder is rank 0 and a CudaRankGroup holds ranks 1..N-1 with a
// thread each: forward() and copy_block() fan out to every rank and join; sampling runs once, on
// rank 0 (its logits are every rank's vocabulary slice gathered). Under TP the media encoder is
// the data-parallel one over the first EngineConfig::mm_encoder_devices ranks' GPUs
// (CudaMediaEncoder::make with devices): encode_media delivers every row to every rank's GPU,
// hands the engine rank 0's rows, and forward() points each rank's device runs at its own copy of
// the same rows. Sparse prefill plans each rank's heads by the model's heads' patterns and
// SinkRouter routes each rank's KV groups (cuda_sparse_prefill.h, cuda_sink_router_step.h): forward()
// prepares the sequences' anchor sets before the ranks run and commits the ranks' searched grid
// layouts after they return. LOOK-M: each rank scores, selects and compacts its own KV heads (the
// selection is per KV head, so no collective; CudaLookMStep), forward() giving every LookMState a
// device score slot per rank before the ranks run. SinkRouter and LOOK-M need the KV heads split,
// not replicated (runs_sink_router / runs_look_m false: a 400).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "engine/backends/step_backend.h"
#include "engine/cuda/cuda_rank_group.h"
#include "engine/cuda/cuda_media_encoder.h"
#include "engine/engine_config.h"
#include "kernels/cuda/core/cuda_device_guard.h"
#include "kernels/cuda/core/device_buffer.h"
#include "kernels/cuda/sampling/gpu_sampler.h"
#include "model/decoder/cuda/cuda_decoder.h"

namespace vlm {

class CudaBackend : public StepBackend {
 public:
  // media: the model's vision encoder on this GPU (CudaMediaEncoder::make), or null (media
  // encode on the host). Built before the decoder, so its reservation counts against
  // options.gpu_memory_utilization before the KV cache is sized.
  // ranks: the other ranks of a tensor-parallel backend (unbuilt; null: one GPU); options.tp is
  // then set to rank 0's here. With ranks, media must be a data-parallel encoder
  // (CudaMediaEncoder::make with devices) or null (media encoded on the host); without, a tower
  // on options.device (InternalError otherwise).
  // Devices: every entry (forward, sample, copy_block, encode_media) makes rank 0's GPU current
  // for its work and restores the caller's, and so does the destructor; the constructor leaves
  // rank 0's GPU current (make_cuda_backend restores its caller's).
  CudaBackend(const LlmDecoder& decoder, const CudaDecoderOptions& options, std::vector<int32_t> eos_token_ids,
              std::unique_ptr<CudaMediaEncoder> media = nullptr, std::unique_ptr<CudaRankGroup> ranks = nullptr);

  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string device() const override;
  int64_t num_kv_blocks() const override { return gpu_.num_kv_blocks(); }
  int64_t kv_bytes_per_block() const override { return gpu_.kv_bytes_per_block(); }
  DType kv_dtype() const override { return gpu_.kv_dtype(); }
  // An FP8 KV cache runs LOOK-M and sparse prefill but XAttention heads (CudaDecoderOptions::kv_fp8).
  bool runs_sparse_prefill(const SparsePrefillConfig& cfg) const override;
  bool runs_look_m() const override;
  // Under TP only with the KV heads split over the ranks (a group's query heads on one rank).
  bool runs_sink_router() const override { return ranks_ == nullptr || kv_heads_split_; }
  // kCudaPrefillOnlyBatchedTokens; make_cuda_backend reserves the step activations for it.
  int prefill_only_batched_tokens_auto() const override { return kCudaPrefillOnlyBatchedTokens; }
  void copy_block(int32_t src, int32_t dst) override;
  void forward(const ForwardBatch& batch, const EmbeddingOverride& override) override;
  void sample(std::span<const SampleTask> tasks, std::vector<SampleResult>& results) override;
  bool encodes_media() const override { return media_ != nullptr; }
  std::shared_ptr<const DeviceEmbeddings> encode_media(std::span<const MediaPixels* const> items,
                                                       std::vector<std::shared_ptr<const void>> owners) override;
  void check_media(const MediaPixels& item, int k) const override {
    if (media_) media_->check(item, k);
  }
  double take_media_encode_ms() override { return media_ ? media_->take_encode_ms() : 0.0; }

  CudaDecoder& decoder() { return gpu_; }
  // TP's ranks 1..N-1 and communicators; null at N = 1.
  const CudaRankGroup* rank_group() const { return ranks_.get(); }
  // Waits for the last forward on every rank whose method counts are pending and adds its SinkRouter
  // counts to the batch's stores and counters; sparse prefill's block counts are in their targets
  // after it too (sample() calls it; tests that download logits instead call it).
  void settle_methods();

 private:
  // Adds task's job (penalties, mask, draw) to the host arrays.
  void add_job(const SampleTask& task, int num_top);

  // TP: one encode's rows on every rank (rank 0's are what the engine sees; cuda_backend.cpp).
  struct RankRows;
  // TP: per_rank[r] = override with its device runs' src moved into rank r's copy of the rows
  // (held in runs_[r] until the next step); per_rank[0] = override.
  void rank_runs(const EmbeddingOverride& override, std::vector<EmbeddingOverride>& per_rank);

  cuda::DeviceRestorePoint restore_;  // first: the caller's device back after every member is freed
  const int device_;                  // rank 0's GPU (options.device; 0 under TP)
  std::unique_ptr<CudaMediaEncoder> media_;  // allocated before the KV cache
  std::unique_ptr<CudaRankGroup> ranks_;     // TP: ranks 1..N-1 (built after gpu_, with its block count)
  CudaDecoder gpu_;                          // rank 0
  bool kv_heads_split_ = false;              // TP: the model's KV heads divide over the ranks
  std::vector<int32_t> eos_token_ids_;
  int64_t model_kv_heads_;  // the model's KV heads (gpu_.config()'s are rank 0's under TP)
  Sampler host_sampler_;  // the fallback for large logprobs requests
  std::vector<cuda::SampleJob> jobs_;
  std::vector<int32_t> pen_tok_, pen_cnt_, mask_;  // [P], [P], [M], built per step
  std::vector<int32_t> counts_;  // [V] scratch, zero between jobs
  std::vector<uint8_t> seen_;    // [V] scratch, zero between jobs
  cuda::PinnedBuffer up_host_, out_host_;
  cuda::DeviceBuffer up_dev_, work_, out_dev_;
  std::vector<float> row_;       // [V] a logits row for the fallback
  std::vector<std::weak_ptr<const RankRows>> rank_rows_;  // TP: the live encodes' rows on every rank
  std::vector<std::vector<DeviceRowRun>> runs_;            // TP: [N] a step's device runs per rank
};

// Options from the engine config (dtype: config's, else the checkpoint's) and the backend; for a
// model with media, its vision encoder on the GPU where its vision architecture has a GPU runner
// (CudaMediaEncoder::make). Throws LoadError for a sparse prefill configuration the GPU does not plan.
std::unique_ptr<StepBackend> make_cuda_backend(const EngineConfig& config, const Model& model,
                                               std::vector<int32_t> eos_token_ids);

}  // namespace vlm

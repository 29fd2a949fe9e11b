// FaultInjectionBackend: for tests only. Wraps a StepBackend and throws a DeviceError from its
// forward() call number `fail_at` (1-based) and every one after it, as a GPU whose context broke
// mid-step would (vlm-server --debug-fail-step N; make_step_backend adds it when
// EngineConfig::debug_fail_step > 0). Lets the CPU build test what a CUDA error in a step does
// to the engine and the server (docs/RELIABILITY.md, "When the device fails").
#pragma once

#include <cstdint>
#include <memory>

#include <fmt/format.h>

#include "engine/backends/step_backend.h"
#include "kernels/core/check.h"
#include "kernels/core/device_error.h"

namespace vlm {

class FaultInjectionBackend : public StepBackend {
 public:
  FaultInjectionBackend(std::unique_ptr<StepBackend> inner, int64_t fail_at)
      : inner_(std::move(inner)), fail_at_(fail_at) {}

  std::string device() const override { return inner_->device(); }
  int64_t num_kv_blocks() const override { return inner_->num_kv_blocks(); }
  int64_t kv_bytes_per_block() const override { return inner_->kv_bytes_per_block(); }
  DType kv_dtype() const override { return inner_->kv_dtype(); }
  bool runs_sparse_prefill(const SparsePrefillConfig& cfg) const override { return inner_->runs_sparse_prefill(cfg); }
  bool runs_look_m() const override { return inner_->runs_look_m(); }
  bool runs_sink_router() const override { return inner_->runs_sink_router(); }
  int prefill_only_batched_tokens_auto() const override { return inner_->prefill_only_batched_tokens_auto(); }
  void copy_block(int32_t src, int32_t dst) override { inner_->copy_block(src, dst); }
  void forward(const ForwardBatch& batch, const EmbeddingOverride& override) override {
    if (++num_forwards_ >= fail_at_)
      throw DeviceError(fmt::format("injected device failure in forward {} (--debug-fail-step {}, tests only)",
                                    num_forwards_, fail_at_));
    inner_->forward(batch, override);
  }
  void sample(std::span<const SampleTask> tasks, std::vector<SampleResult>& results) override {
    inner_->sample(tasks, results);
  }
  bool encodes_media() const override { return inner_->encodes_media(); }
  std::shared_ptr<const DeviceEmbeddings> encode_media(std::span<const MediaPixels* const> items,
                                                       std::vector<std::shared_ptr<const void>> owners) override {
    return inner_->encode_media(items, std::move(owners));
  }
  void check_media(const MediaPixels& item, int k) const override { inner_->check_media(item, k); }

 private:
  std::unique_ptr<StepBackend> inner_;
  int64_t fail_at_;
  int64_t num_forwards_ = 0;
};

}  // namespace vlm

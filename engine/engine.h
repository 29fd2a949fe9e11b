// Engine: continuous batching over one model (model/families/model.h), driven by step() on one thread (EngineLoop runs
// it on its own thread; tests and tools call it directly).
//   step() = schedule -> run -> sample -> postprocess, each a named, timed call.
// Requests come in through add_request() with a RequestChannel for their events; a request that
// fails (bad text, a failing step) ends with an error event and the engine goes on.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/backends/step_backend.h"
#include "engine/scheduling/block_manager.h"
#include "engine/engine_config.h"
#include "engine/kv_compressor.h"
#include "engine/model_runner.h"
#include "engine/sampling/output_text.h"
#include "engine/request.h"
#include "engine/request_channel.h"
#include "engine/scheduling/scheduler.h"
#include "engine/text_decoder.h"
#include "model/families/model.h"

namespace vlm {

class Engine {
 public:
  // Allocates the KV cache. Throws LoadError when the configuration cannot work (the cache
  // cannot hold one max_model_len sequence, a bad block size) and std::bad_alloc when the cache
  // does not fit in memory. text_decoders may be null: no text, and stop strings are refused.
  // Requests may carry media (GenerationRequest::images) when the model has_media().
  Engine(const EngineConfig& config, std::unique_ptr<Model> model,
         std::shared_ptr<const TextDecoderFactory> text_decoders = nullptr);
  // A text checkpoint's decoder: the engine on TextModel(decoder).
  Engine(const EngineConfig& config, std::unique_ptr<LlmDecoder> decoder,
         std::shared_ptr<const TextDecoderFactory> text_decoders = nullptr);
  ~Engine();  // aborts every live request (its channel gets a final abort event)
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineConfig& config() const { return config_; }
  int64_t max_model_len() const { return max_model_len_; }
  const Model& model() const { return *model_; }
  const LlmDecoder& decoder() const { return model_->decoder(); }
  const ModelRunner& runner() const { return runner_; }
  const StepBackend& backend() const { return *backend_; }
  const Scheduler& scheduler() const { return scheduler_; }
  const BlockManager& block_manager() const { return blocks_; }
  const EngineStats& stats() const { return stats_; }

  // Checks a request without touching engine state (thread-safe): prompt ids within the
  // vocabulary, modality tags and media (each item k fits the encoder, is tagged with its own
  // modality on exactly media_tokens(k) consecutive prompt tokens, items in prompt order;
  // media only on a multimodal model, video only on one that accepts it; M-RoPE placeholders
  // matching the items' grids),
  // sampling params, prompt + max_tokens within max_model_len, stop
  // strings only with a text decoder. Throws RequestError (400).
  void validate(const GenerationRequest& request) const;
  // The request's media as its sequences will carry them (first prompt positions, token counts,
  // M-RoPE positions, the grid's known strides: engine/media_inputs.h), without the pixels (add_request
  // moves them in); null without media. Throws RequestError (400) as validate() documents.
  std::shared_ptr<MediaInputs> check_media(const GenerationRequest& request) const;
  // Validates and queues the request; its events go to `channel`. Throws RequestError without
  // queueing: 400 (validate, or an id already live), 429 (the waiting queue is full).
  void add_request(GenerationRequest request, std::shared_ptr<RequestChannel> channel);
  // Ends a live request in any state with finish_reason abort; false for an unknown id.
  bool abort_request(const std::string& request_id);
  // Ends every live request with an error event (status 500 or 503).
  void fail_all(const RequestFailure& failure);

  bool has_unfinished() const { return !requests_.empty(); }
  int num_requests() const { return static_cast<int>(requests_.size()); }

  // Forgets every cached prefix block (POST /reset_prefix_cache); returns how many were cached.
  int64_t reset_prefix_cache();
  // Fills request.media_keys (media_item_key of each item) unless already there; thread-safe,
  // so that EngineLoop::submit hashes the pixels off the engine thread.
  static void fill_media_keys(GenerationRequest& request);

  // One engine step (a no-op when nothing is scheduled). A failed model run ends the step's
  // requests with a 500 and returns; a DeviceError is rethrown untouched (the device's state is
  // unknown: EngineLoop marks the engine failed, then ends every request).
  void step();

  // For when the engine goes idle: the block integrity check, and no block may still be in use
  // without a live request. Logs an error and returns false on a problem (counted in stats).
  bool check_idle();

 private:
  struct Request;
  struct Sampled {
    Sequence* seq = nullptr;
    int64_t seq_id = 0;  // looked up first: a failing request frees its sequences mid-loop
    SampleResult result;
  };

  SchedulerOutput schedule();
  bool run(const SchedulerOutput& out);
  std::vector<Sampled> sample(const SchedulerOutput& out);
  void postprocess(std::vector<Sampled>& sampled);
  void compress_kv(const SchedulerOutput& out);  // LOOK-M: trim compressed sequences' tables

  void emit_token(Request& r, Sequence& seq, SampleResult& result);
  void log_first_token(const Request& r) const;  // debug: where a request's TTFT went
  void account_prefill(const SchedulerOutput& out, double encode_ms);  // debug: its prefill steps' share
  void abort_cancelled();
  void fork_choices(Request& r, Sequence* parent);
  void register_sequence(Request& r, std::unique_ptr<Sequence> seq);
  // The sequence's prefix-cache policy (Sequence::reads_prefix_cache and publish limit, seed).
  void set_prefix_cache_policy(Sequence& seq, const std::string& cache_salt) const;
  void fail_request(Request& r, const RequestFailure& failure);
  void finish_request(Request& r);
  void update_gauges();
  // Lowers a max_model_len taken from the model to what the KV cache holds (with a warning).
  void fit_max_model_len();

  EngineConfig config_;
  std::unique_ptr<Model> model_;
  const LlmDecoder* decoder_ = nullptr;  // the model's
  std::shared_ptr<const TextDecoderFactory> text_decoders_;
  int64_t max_model_len_ = 0;
  std::vector<int32_t> eos_token_ids_;
  std::unique_ptr<StepBackend> backend_;  // owns the KV cache
  BlockManager blocks_;
  Scheduler scheduler_;
  ModelRunner runner_;
  KVCompressor kv_compressor_;
  std::vector<SampleTask> sample_tasks_;     // the current step's, reused
  std::vector<SampleResult> sample_results_;
  std::unordered_map<std::string, std::unique_ptr<Request>> requests_;
  std::unordered_map<int64_t, Request*> request_of_seq_;
  int64_t next_seq_id_ = 1;
  EngineStats stats_;
  StepTimings step_timings_;                           // the current step's (debug log)
  std::chrono::steady_clock::time_point step_started_;  // the current step's start
};

}  // namespace vlm

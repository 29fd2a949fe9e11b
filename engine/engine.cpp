// Engine, part 1: construction and the step stages. Part 2 (engine_requests.cpp): the life of
// a request.
#include "engine/engine.h"

#include "kernels/gemm/gemm.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "engine/backends/make_step_backend.h"
#include "engine/engine_request.h"
#include "kernels/core/check.h"
#include "kernels/core/device_error.h"
#include "kernels/core/log.h"

namespace vlm {

namespace {

// Runs f, adding its wall time to `seconds`.
template <typename F>
auto timed(double& seconds, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  struct Add {
    double& s;
    std::chrono::steady_clock::time_point t0;
    ~Add() { s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
  } add{seconds, t0};
  return f();
}

int64_t resolve_max_model_len(const EngineConfig& c, const ModelConfig& m) {
  return c.max_model_len > 0 ? c.max_model_len : m.max_position_embeddings;
}

std::vector<int32_t> eos_ids(const ModelConfig& m) {
  std::vector<int32_t> ids;
  for (int64_t id : m.eos_token_ids)
    if (id >= 0 && id < m.vocab_size) ids.push_back(static_cast<int32_t>(id));
  return ids;
}

const LlmDecoder* model_decoder(const Model* model) {
  VLM_CHECK(model != nullptr, "an engine without a model");
  return &model->decoder();
}

// The scheduler's config with prefill_only_batched_tokens auto resolved by the backend (kept in
// the engine's config too, so config() reports what runs).
const SchedulerConfig& resolve_scheduler(EngineConfig& c, const StepBackend& backend) {
  c.scheduler = resolve_prefill_only(c.scheduler, backend.prefill_only_batched_tokens_auto());
  return c.scheduler;
}

}  // namespace

Engine::Engine(const EngineConfig& config, std::unique_ptr<LlmDecoder> decoder,
               std::shared_ptr<const TextDecoderFactory> text_decoders)
    : Engine(config, std::make_unique<TextModel>(std::move(decoder)), std::move(text_decoders)) {}

Engine::Engine(const EngineConfig& config, std::unique_ptr<Model> model,
               std::shared_ptr<const TextDecoderFactory> text_decoders)
    : config_(config),
      model_(std::move(model)),
      decoder_(model_decoder(model_.get())),
      text_decoders_(std::move(text_decoders)),
      max_model_len_(resolve_max_model_len(config_, decoder_->config())),
      eos_token_ids_(eos_ids(decoder_->config())),
      backend_(make_step_backend(config_, *model_, eos_token_ids_, max_model_len_)),
      blocks_(backend_->num_kv_blocks(), config_.block_size, config_.enable_prefix_caching),
      scheduler_(resolve_scheduler(config_, *backend_), blocks_),
      runner_(*model_, *backend_, config_.block_size),
      kv_compressor_(static_cast<int>(decoder_->config().num_layers), static_cast<int>(decoder_->config().num_kv_heads)) {
  if (config_.look_m.enabled) vlm::validate(config_.look_m.params);
  fit_max_model_len();
  runner_.set_sink_router(config_.sink_router, config_.sink_router_config);
  VLM_LOG_INFO("engine: KV cache {} blocks of {} tokens ({} tokens, {:.1f} MiB {}), max_model_len {}, "
               "max_num_seqs {}, max_num_batched_tokens {} ({} without decodes), prefix caching {}",
               blocks_.num_blocks(), config_.block_size, blocks_.num_blocks() * config_.block_size,
               static_cast<double>(blocks_.num_blocks() * backend_->kv_bytes_per_block()) / (1 << 20),
               dtype_name(backend_->kv_dtype()), max_model_len_,
               config_.scheduler.max_num_seqs, config_.scheduler.max_num_batched_tokens,
               max_step_tokens(config_.scheduler), blocks_.prefix_caching() ? "on" : "off");
  runner_.set_sparse_prefill(config_.sparse_prefill);
  if (max_model_len_ > decoder_->config().max_position_embeddings)
    VLM_LOG_INFO("engine: max_model_len {} is beyond the model's max_position_embeddings {}", max_model_len_,
                 decoder_->config().max_position_embeddings);
  update_gauges();
}

void Engine::fit_max_model_len() {
  const int64_t capacity = blocks_.num_blocks() * config_.block_size;
  if (max_model_len_ <= capacity) return;
  // Only a length taken from the model gets here (a user's --max-model-len that does not fit was a
  // LoadError in make_step_backend): serve what the cache holds, as llama.cpp serves its -c.
  VLM_LOG_WARN("engine: the KV cache holds {} tokens, fewer than the model's {} positions: max_model_len lowered "
               "to {} (give the cache more memory for longer sequences)",
               capacity, max_model_len_, capacity);
  max_model_len_ = capacity;
}

Engine::~Engine() {
  std::vector<std::string> ids;
  for (const auto& [id, r] : requests_) ids.push_back(id);
  for (const std::string& id : ids) abort_request(id);
}

// ---- step ----------------------------------------------------------------------------------

void Engine::step() {
  abort_cancelled();
  step_started_ = std::chrono::steady_clock::now();
  StepTimings& t = step_timings_;
  t = {};
  const SchedulerOutput out = timed(t.schedule_s, [&] { return schedule(); });
  if (!out.empty() && timed(t.run_s, [&] { return run(out); })) {
    for (const ScheduledChunk& c : out.chunks) blocks_.cache_full_blocks(*c.seq);  // K/V now computed
    timed(t.run_s, [&] { compress_kv(out); });
    std::vector<Sampled> sampled = timed(t.sample_s, [&] { return sample(out); });
    const double encode_ms = runner_.take_encode_ms();  // always taken: the timer's events are pooled
    if (spdlog::should_log(spdlog::level::debug)) account_prefill(out, encode_ms);
    timed(t.postprocess_s, [&] { postprocess(sampled); });
  }
  if (config_.check_integrity_every_step) scheduler_.check_integrity();
  ++stats_.num_steps;
  stats_.last_step = t;
  stats_.total_time += t;
  stats_.last_step_num_tokens = out.num_batched_tokens;
  stats_.last_step_num_decode_seqs = out.num_decode_seqs;
  stats_.last_step_num_prefill_seqs = out.num_prefill_seqs;
  stats_.num_computed_prefill_tokens += out.num_prefill_tokens;
  update_gauges();
}

// The debug timeline: this step's time (schedule, run, sample: the GPU has finished the step) and
// its media encoding, to the requests whose prompt it prefilled.
void Engine::account_prefill(const SchedulerOutput& out, double encode_ms) {
  const double step_ms = (step_timings_.schedule_s + step_timings_.run_s + step_timings_.sample_s) * 1e3;
  for (const ScheduledChunk& c : out.chunks) {
    if (!c.is_prefill || c.seq->index != 0) continue;
    auto it = request_of_seq_.find(c.seq->id);
    if (it == request_of_seq_.end()) continue;
    Request& r = *it->second;
    ++r.prefill_steps;
    r.prefill_steps_ms += step_ms;
    if (c.seq->media) r.media_encode_ms += encode_ms;
  }
}

SchedulerOutput Engine::schedule() {
  SchedulerOutput out = scheduler_.schedule();
  stats_.num_preemptions += static_cast<int64_t>(out.preempted.size());
  for (const Sequence* s : out.preempted)
    VLM_LOG_DEBUG("preempted sequence {} ({} tokens) for lack of KV blocks", s->id, s->num_tokens());
  return out;
}

bool Engine::run(const SchedulerOutput& out) {
  try {
    kv_compressor_.prepare(out);
    runner_.run(out);
    return true;
  } catch (const std::exception& e) {
    // The device failed: its state is unknown, so the engine cannot go on. EngineLoop marks the
    // failure (health 503) and then ends every request, this step's too.
    if (dynamic_cast<const DeviceError*>(&e) != nullptr) throw;
    // The whole step failed: its requests end with an error, the others go on.
    VLM_LOG_ERROR("engine step failed: {}", e.what());
    const RequestFailure failure{500, "server_error", std::string("internal error: ") + e.what(), ""};
    std::vector<std::string> ids;
    for (const ScheduledChunk& c : out.chunks) {
      auto it = request_of_seq_.find(c.seq->id);
      if (it != request_of_seq_.end() && std::find(ids.begin(), ids.end(), it->second->req.id) == ids.end())
        ids.push_back(it->second->req.id);
    }
    for (const std::string& id : ids) fail_request(*requests_.at(id), failure);
    return false;
  }
}

std::vector<Engine::Sampled> Engine::sample(const SchedulerOutput& out) {
  std::vector<Sampled> sampled;
  sample_tasks_.clear();
  int64_t row = 0;
  for (const ScheduledChunk& c : out.chunks) {
    if (!c.samples) continue;
    Sequence* seq = c.seq;
    Request& r = *request_of_seq_.at(seq->id);
    const bool forks = seq->num_forks_pending > 0;
    if (forks) fork_choices(r, seq);
    sample_tasks_.push_back({seq, row});
    if (forks)  // the new choices sample from the parent's row, each with its own RNG
      for (size_t i = 1; i < r.seqs.size(); ++i) sample_tasks_.push_back({r.seqs[i].get(), row});
    ++row;
  }
  backend_->sample(sample_tasks_, sample_results_);
  for (size_t i = 0; i < sample_tasks_.size(); ++i)
    sampled.push_back({sample_tasks_[i].seq, sample_tasks_[i].seq->id, std::move(sample_results_[i])});
  return sampled;
}

void Engine::postprocess(std::vector<Sampled>& sampled) {
  for (Sampled& s : sampled) {
    auto it = request_of_seq_.find(s.seq_id);
    if (it == request_of_seq_.end()) continue;  // its request failed earlier in this loop
    Request& r = *it->second;
    try {
      emit_token(r, *s.seq, s.result);
    } catch (const std::exception& e) {
      fail_request(r, {500, "server_error", std::string("internal error: ") + e.what(), ""});
    }
  }
}

void Engine::compress_kv(const SchedulerOutput& out) {
  const int64_t freed = kv_compressor_.apply(out, blocks_, stats_);
  stats_.look_m_kv_bytes_freed += freed * backend_->kv_bytes_per_block();
  if (freed > 0) VLM_LOG_DEBUG("LOOK-M freed {} KV blocks", freed);
}

void Engine::emit_token(Request& r, Sequence& seq, SampleResult& result) {
  const SamplingParams& p = seq.params;
  const int32_t tok = result.token_id;
  seq.token_ids.push_back(tok);
  ++stats_.num_generation_tokens;
  RequestEvent ev;
  ev.index = seq.index;
  ev.token_ids.push_back(tok);
  if (result.logprobs) ev.logprobs.push_back(std::move(*result.logprobs));

  // vLLM's order: stop tokens (after min_tokens), then stop strings, then the length limits.
  FinishReason reason = FinishReason::None;
  bool stop_token = false;
  if (seq.num_output_tokens() >= p.min_tokens) {
    if (!p.ignore_eos && std::find(eos_token_ids_.begin(), eos_token_ids_.end(), tok) != eos_token_ids_.end()) {
      stop_token = true;
    } else if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), tok) != p.stop_token_ids.end()) {
      stop_token = true;
      ev.stop_token_id = tok;
    }
    if (stop_token) reason = FinishReason::Stop;
  }
  OutputText& text = *r.texts[static_cast<size_t>(seq.index)];
  if (!stop_token || p.include_stop_str_in_output) {  // a stop token's text is left out
    OutputText::Delta d = text.push(tok);
    ev.text = std::move(d.text);
    if (d.stop && reason == FinishReason::None) {
      reason = FinishReason::Stop;
      ev.stop_string = std::move(d.stop);
    }
  }
  if (reason == FinishReason::None && (seq.num_output_tokens() >= r.max_tokens || seq.num_tokens() >= max_model_len_))
    reason = FinishReason::Length;
  if (reason != FinishReason::None) {
    ev.text += text.finish();
    ev.finish_reason = reason;
    scheduler_.finish(&seq, reason);
    ++r.num_finished;
  }
  const bool done = r.num_finished == r.req.params.n;
  if (done) {
    ev.usage = r.usage();
    ev.done = true;
  }
  if (seq.index == 0 && seq.num_output_tokens() == 1 && spdlog::should_log(spdlog::level::debug)) log_first_token(r);
  r.channel->push(std::move(ev));
  if (done) finish_request(r);
}

void Engine::log_first_token(const Request& r) const {
  using ms = std::chrono::duration<double, std::milli>;
  const auto now = std::chrono::steady_clock::now();
  const StepTimings& t = step_timings_;
  const double waited = r.req.submitted_at.time_since_epoch().count() ? ms(r.added_at - r.req.submitted_at).count() : 0;
  const double step_after_submit =
      r.req.submitted_at.time_since_epoch().count() ? ms(step_started_ - r.req.submitted_at).count() : 0;
  VLM_LOG_DEBUG("engine: request {}: {} prompt tokens ({} cached) queued {:.2f} ms, first token {:.2f} ms after "
                "the engine took it; its step began {:.2f} ms before it ({:.2f} ms after the submit): schedule "
                "{:.2f} run {:.2f} sample {:.2f} ms; prefill {} steps {:.2f} ms, media encode {:.2f} ms",
                r.req.id, r.req.prompt_ids.size(), r.seqs.front()->num_prefix_cached_tokens, waited,
                ms(now - r.added_at).count(), ms(now - step_started_).count(), step_after_submit,
                t.schedule_s * 1e3, t.run_s * 1e3, t.sample_s * 1e3, r.prefill_steps, r.prefill_steps_ms,
                r.media_encode_ms);
}

void Engine::update_gauges() {
  stats_.num_requests = static_cast<int>(requests_.size());
  stats_.num_waiting_seqs = scheduler_.num_waiting();
  stats_.num_running_seqs = scheduler_.num_running();
  stats_.sink_groups_routed = runner_.sink_counters().groups_routed;
  stats_.sink_groups_skipped = runner_.sink_counters().groups_skipped;
  stats_.sink_kv_bytes_skipped = runner_.sink_counters().kv_bytes_skipped;
  stats_.num_kv_blocks = blocks_.num_blocks();
  stats_.num_free_kv_blocks = blocks_.num_free_blocks();
  stats_.kv_usage = blocks_.usage();
  stats_.prefix_cache_queries = blocks_.prefix_cache_stats().queries;
  stats_.prefix_cache_hits = blocks_.prefix_cache_stats().hits;
  stats_.num_cached_kv_blocks = blocks_.num_cached_blocks();
  stats_.num_media_items_encoded = runner_.num_images_encoded();
}

int64_t Engine::reset_prefix_cache() {
  const int64_t n = blocks_.reset_prefix_cache();
  VLM_LOG_INFO("prefix cache reset: {} cached blocks forgotten", n);
  update_gauges();
  return n;
}

bool Engine::check_idle() {
  try {
    scheduler_.check_integrity();
    if (!has_unfinished())
      VLM_CHECK(blocks_.num_used_blocks() == 0 && !scheduler_.has_unfinished(),
                "idle engine: {} KV blocks still in use, {} waiting and {} running sequences without a request",
                blocks_.num_used_blocks(), scheduler_.num_waiting(), scheduler_.num_running());
    return true;
  } catch (const std::exception& e) {
    ++stats_.num_integrity_failures;
    VLM_LOG_ERROR("KV block integrity check failed: {}", e.what());
    return false;
  }
}

}  // namespace vlm

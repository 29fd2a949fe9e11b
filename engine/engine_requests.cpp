// Engine, part 2: the life of a request (validation, admission, choices, abort, failure).
// Part 1 (engine.cpp): construction and the step stages.
#include <random>

#include <fmt/format.h>

#include "engine/engine.h"
#include "engine/engine_request.h"
#include "kernels/core/check.h"
#include "kernels/core/log.h"

namespace vlm {

namespace {
[[noreturn]] void bad_request(const std::string& param, const std::string& message) {
  throw RequestError(400, "invalid_request_error", message, param);
}

}  // namespace

void Engine::validate(const GenerationRequest& request) const {
  const int64_t V = decoder_->config().vocab_size;
  const auto P = static_cast<int64_t>(request.prompt_ids.size());
  if (P == 0) bad_request("messages", "the prompt is empty");
  for (int32_t id : request.prompt_ids)
    if (id < 0 || id >= V) bad_request("prompt", fmt::format("prompt token id {} is outside the vocabulary of {}", id, V));
  if (!request.prompt_modalities.empty() && static_cast<int64_t>(request.prompt_modalities.size()) != P)
    bad_request("messages", fmt::format("{} modality tags for {} prompt tokens", request.prompt_modalities.size(), P));
  check_media(request);
  request.params.validate(V);
  resolve_max_tokens(P, request.params.max_tokens, max_model_len_);
  if (!request.params.stop.empty() && !text_decoders_)
    bad_request("stop", "stop strings need a tokenizer, and this engine has none");
  if (request.params.sparse_prefill) {
    SparsePrefillConfig sp = config_.sparse_prefill;
    sp.method = *request.params.sparse_prefill;
    if (!backend_->runs_sparse_prefill(sp))
      bad_request("vlm_options", fmt::format("sparse prefill method {} does not run on {} over a {} KV cache yet",
                                             sparse_prefill_method_name(sp.method), backend_->device(),
                                             dtype_name(backend_->kv_dtype())));
  }
  if (request.look_m && request.look_m->enabled && !backend_->runs_look_m())
    bad_request("vlm_options", fmt::format("LOOK-M does not run on {} for this model's attention shape or KV "
                                           "cache dtype ({})",
                                           backend_->device(), dtype_name(backend_->kv_dtype())));
  if (request.params.sink_router.value_or(false) && !backend_->runs_sink_router())
    bad_request("vlm_options", fmt::format("SinkRouter does not run on {} yet", backend_->device()));
  if (request.params.n > config_.scheduler.max_num_seqs)
    bad_request("n", fmt::format("n = {} is more than the server runs at once ({})", request.params.n,
                                 config_.scheduler.max_num_seqs));
}

std::shared_ptr<MediaInputs> Engine::check_media(const GenerationRequest& request) const {
  const auto N = static_cast<int32_t>(request.images.size());
  int64_t num_tagged = 0;
  for (const ModalityTag& t : request.prompt_modalities)
    if (t.modality != Modality::Text) ++num_tagged;
  if (N == 0 && num_tagged == 0) return nullptr;
  // On a text-only model, modality tags without images carry no embeddings: they only steer the
  // attention methods (LOOK-M's text prior, modality-aware sparse prefill), e.g. in tests and
  // benchmarks on text checkpoints. Images themselves need a multimodal model.
  if (!model_->has_media() && N == 0) return nullptr;
  if (!model_->has_media()) bad_request("messages", "this model does not accept image input");
  auto media = std::make_shared<MediaInputs>();
  media->first_token.assign(static_cast<size_t>(N), -1);
  std::vector<int64_t> count(static_cast<size_t>(N), 0);
  for (size_t pos = 0; pos < request.prompt_modalities.size(); ++pos) {
    const ModalityTag& t = request.prompt_modalities[pos];
    if (t.modality == Modality::Text) continue;
    if (t.modality == Modality::Video && !model_->accepts_video())
      bad_request("messages", "this model does not accept video input");
    if (t.modality != Modality::Image && t.modality != Modality::Video)
      bad_request("messages", fmt::format("this model does not accept {} input", modality_name(t.modality)));
    if (t.media_index < 0 || t.media_index >= N)
      bad_request("messages", fmt::format("prompt token {} is tagged {} {}, and the request has {} media items", pos,
                                          modality_name(t.modality), t.media_index, N));
    const MediaPixels& item = request.images[static_cast<size_t>(t.media_index)];
    if (item.modality != t.modality)
      bad_request("messages", fmt::format("prompt token {} is tagged {} {}, and media item {} is {}", pos,
                                          modality_name(t.modality), t.media_index, t.media_index,
                                          modality_name(item.modality)));
    auto& first = media->first_token[static_cast<size_t>(t.media_index)];
    if (first < 0) first = static_cast<int32_t>(pos);
    if (static_cast<int64_t>(pos) != first + count[static_cast<size_t>(t.media_index)]++)
      bad_request("messages", fmt::format("the tokens of {} {} are not consecutive", modality_name(t.modality),
                                          t.media_index));
  }
  int64_t row = 0;
  for (int32_t k = 0; k < N; ++k) {
    const MediaPixels& item = request.images[static_cast<size_t>(k)];
    if (item.modality == Modality::Video && !model_->accepts_video())
      bad_request("messages", "this model does not accept video input");
    const int64_t n = model_->media_tokens(item, k);  // throws for pixels that do not fit
    backend_->check_media(item, k);                        // throws for media beyond the memory plan
    if (count[static_cast<size_t>(k)] != n)
      bad_request("messages", fmt::format("{} {} has {} prompt tokens, the model takes {} for it", modality_name(item.modality),
                                          k, count[static_cast<size_t>(k)], n));
    if (k > 0 && media->first_token[static_cast<size_t>(k)] < media->first_token[static_cast<size_t>(k - 1)])
      bad_request("messages", "media items must appear in the prompt in order");
    media->num_tokens.push_back(n);
    media->embed_row.push_back(row);
    media->tokens_per_frame.push_back(model_->tokens_per_frame(item));
    row += n;
  }
  // The grid's known strides: one video per run of group items (Qwen3-VL), its period counting the
  // timestamp text between groups (engine/media_inputs.h).
  media->video_frame_tokens =
      grid_known_strides(video_token_spans(request.images, media->first_token, media->num_tokens, media->tokens_per_frame));
  media->mrope = model_->mrope_positions(request.prompt_ids, request.images);
  return media;
}

void Engine::add_request(GenerationRequest request, std::shared_ptr<RequestChannel> channel) {
  try {
    validate(request);
    if (requests_.count(request.id))
      bad_request("request_id", fmt::format("request id '{}' is already in use", request.id));
    if (scheduler_.waiting_full())
      throw RequestError(429, "rate_limit_exceeded",
                         fmt::format("The server is busy: {} requests are already waiting. Retry later.",
                                     scheduler_.num_waiting()));
  } catch (const RequestError&) {
    ++stats_.num_requests_rejected;
    throw;
  }
  auto r = std::make_unique<Request>();
  std::shared_ptr<MediaInputs> media = check_media(request);
  if (media) {
    fill_media_keys(request);
    media->item_keys = std::move(request.media_keys);
    media->images = std::move(request.images);
  }
  r->max_tokens = resolve_max_tokens(static_cast<int64_t>(request.prompt_ids.size()), request.params.max_tokens,
                                     max_model_len_);
  r->channel = std::move(channel);
  r->req = std::move(request);
  r->seqs.reserve(static_cast<size_t>(r->req.params.n));
  r->texts.resize(static_cast<size_t>(r->req.params.n));
  auto seq = std::make_unique<Sequence>(next_seq_id_++, r->req.prompt_ids, r->req.params, r->req.prompt_modalities);
  seq->media = std::move(media);
  seq->look_m = r->req.look_m.value_or(config_.look_m);
  set_prefix_cache_policy(*seq, r->req.cache_salt);
  Request* raw = r.get();
  stats_.num_prompt_tokens += static_cast<int64_t>(raw->req.prompt_ids.size());
  requests_.emplace(raw->req.id, std::move(r));
  register_sequence(*raw, std::move(seq));
  scheduler_.add(raw->seqs[0].get());
  update_gauges();
}

void Engine::fill_media_keys(GenerationRequest& request) {
  if (request.media_keys.size() == request.images.size()) return;
  request.media_keys.clear();
  for (const MediaPixels& item : request.images) request.media_keys.push_back(media_item_key(item));
}

void Engine::set_prefix_cache_policy(Sequence& seq, const std::string& cache_salt) const {
  seq.prefix_cache_seed = prefix_cache_seed(cache_salt);
  if (KVCompressor::applies(seq)) {  // compacted in place; its scores need the whole prompt
    seq.reads_prefix_cache = false;
    seq.prefix_cache_publish_limit = 0;
    return;
  }
  const SparsePrefillConfig& sp = config_.sparse_prefill;
  const bool sparse = seq.params.sparse_prefill.value_or(sp.method) != SparsePrefillMethod::Off &&
                      seq.num_prompt_tokens >= sp.min_prompt_len;
  if (sparse) seq.prefix_cache_publish_limit = 0;  // reads exact blocks, publishes no approximate ones
  else if (seq.params.sink_router.value_or(config_.sink_router))
    seq.prefix_cache_publish_limit = seq.num_prompt_tokens;  // prefill is dense; routed decode is not
}

void Engine::register_sequence(Request& r, std::unique_ptr<Sequence> seq) {
  const SamplingParams& p = r.req.params;
  if (p.seed) {
    seq->rng.seed(*p.seed + static_cast<uint64_t>(seq->index));
  } else {
    static thread_local std::mt19937_64 seeds{std::random_device{}()};
    seq->rng.seed(seeds());
  }
  r.texts[static_cast<size_t>(seq->index)] = std::make_unique<OutputText>(
      text_decoders_ ? text_decoders_->make(seq->prompt_ids(), p.skip_special_tokens) : nullptr, p.stop,
      p.include_stop_str_in_output);
  request_of_seq_[seq->id] = &r;
  r.seqs.push_back(std::move(seq));
}

void Engine::fork_choices(Request& r, Sequence* parent) {
  VLM_CHECK(parent->num_output_tokens() == 0 && parent->index == 0, "fork of sequence {} with {} outputs",
            parent->id, parent->num_output_tokens());
  while (parent->num_forks_pending > 0) {
    auto child = std::make_unique<Sequence>(next_seq_id_++, std::vector<int32_t>(parent->token_ids), parent->params,
                                            parent->prompt_modalities);
    child->group_id = parent->group_id;
    child->media = parent->media;
    child->look_m = parent->look_m;  // a recompute after preemption compresses again
    child->index = static_cast<int>(r.seqs.size());
    child->sink_anchors = parent->sink_anchors;  // same prefix, same anchors
    child->reads_prefix_cache = parent->reads_prefix_cache;
    child->prefix_cache_publish_limit = parent->prefix_cache_publish_limit;
    child->prefix_cache_seed = parent->prefix_cache_seed;
    child->block_hashes = parent->block_hashes;
    child->num_prefix_cached_tokens = parent->num_prefix_cached_tokens;
    Sequence* raw = child.get();
    register_sequence(r, std::move(child));
    scheduler_.fork(parent, raw);
  }
}

bool Engine::abort_request(const std::string& request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return false;
  Request& r = *it->second;
  for (auto& seq : r.seqs) {
    if (seq->is_finished()) continue;
    scheduler_.abort(seq.get(), FinishReason::Abort);
    ++r.num_finished;
  }
  RequestEvent ev;
  ev.finish_reason = FinishReason::Abort;
  ev.usage = r.usage();
  ev.done = true;
  r.channel->push(std::move(ev));
  finish_request(r);
  update_gauges();
  return true;
}

void Engine::fail_request(Request& r, const RequestFailure& failure) {
  VLM_LOG_WARN("request {} failed ({}): {}", r.req.id, failure.status, failure.message);
  for (auto& seq : r.seqs) scheduler_.abort(seq.get(), FinishReason::Error);
  RequestEvent ev;
  ev.finish_reason = FinishReason::Error;
  ev.error = failure;
  ev.usage = r.usage();
  ev.done = true;
  r.channel->push(std::move(ev));
  r.seqs.front()->finish_reason = FinishReason::Error;
  finish_request(r);
}

void Engine::fail_all(const RequestFailure& failure) {
  std::vector<Request*> all;
  for (auto& [id, r] : requests_) all.push_back(r.get());
  for (Request* r : all) fail_request(*r, failure);
  update_gauges();
}

void Engine::finish_request(Request& r) {
  ++stats_.num_requests_finished[static_cast<int>(r.seqs.front()->finish_reason)];
  for (const auto& s : r.seqs) request_of_seq_.erase(s->id);
  requests_.erase(r.req.id);  // destroys r
}

void Engine::abort_cancelled() {
  std::vector<std::string> gone;
  for (const auto& [id, r] : requests_)
    if (r->channel->cancelled()) gone.push_back(id);
  for (const std::string& id : gone) abort_request(id);
}

}  // namespace vlm

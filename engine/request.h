// What crosses the boundary between the server and the engine: a GenerationRequest in, a stream
// of RequestEvents out (through a RequestChannel, see request_channel.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/media_inputs.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/sampling_params.h"
#include "engine/scheduling/sequence.h"
#include "model/decoder/modality.h"

namespace vlm {

struct GenerationRequest {
  std::string id;                          // unique among live requests (e.g. "chatcmpl-...")
  std::vector<int32_t> prompt_ids;         // [P] tokenized prompt
  std::vector<ModalityTag> prompt_modalities;  // [P], or empty for a text-only prompt
  // Media items of a multimodal prompt (engine on a Model with media), images and videos in
  // prompt order: item k fills the model's media_tokens(item k) consecutive prompt tokens tagged
  // {item k's modality, k} (LLaVA: images [3, S, S], tokens_per_image each; Qwen2-VL family:
  // patches with grid_thw, t*h*w / 4 tokens).
  std::vector<MediaPixels> images;
  SamplingParams params;
  std::optional<LookMSetting> look_m;      // LOOK-M override; nullopt: the server's default
  // Prefix caching: requests with different salts never share cached blocks (vLLM's cache_salt).
  std::string cache_salt;
  std::vector<BlockHash> media_keys;       // [images.size()] or empty: Engine::fill_media_keys
  // When EngineLoop::submit queued it (the engine's debug log times the first token from here).
  std::chrono::steady_clock::time_point submitted_at{};
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // over all n choices
  int64_t cached_tokens = 0;      // prompt tokens taken from the prefix cache (prompt_tokens_details)
  // LOOK-M: the prompt's KV cache tokens before and after compression (both 0: not compressed).
  // With n > 1 choices the prompt's cache is compressed once and shared: counted once.
  int64_t look_m_kv_tokens_before = 0;
  int64_t look_m_kv_tokens_kept = 0;
  // SinkRouter: decode (token, layer, kv group) decisions of all choices, and the skipped ones.
  int64_t sink_groups_routed = 0;
  int64_t sink_groups_skipped = 0;
  // Sparse prefill: key blocks computed and causal key blocks over the prompt's sparse-prefilled
  // chunks, all layers and heads (both 0: the prompt ran dense). Density = computed / causal.
  double prefill_blocks_computed = 0;
  double prefill_blocks_causal = 0;
  int64_t total_tokens() const { return prompt_tokens + completion_tokens; }
};

// An error that ended the request: the HTTP status and OpenAI error type it maps to.
struct RequestFailure {
  int status = 500;
  std::string type = "server_error";
  std::string message;
  std::string param;
};

// One step's news for one choice of a request. The last event of a choice has finish_reason;
// the last event of the request also has usage (and done). Token events never have an empty
// token_ids; an error event (error set, done) may come at any time and ends the request.
struct RequestEvent {
  int index = 0;                        // choice index (0..n-1)
  std::vector<int32_t> token_ids;       // new tokens of this choice
  std::string text;                     // new text (may be empty: held back or no tokenizer)
  std::vector<TokenLogprobs> logprobs;  // one per new token, when asked for
  FinishReason finish_reason = FinishReason::None;
  std::optional<std::string> stop_string;   // the stop string that ended the choice
  std::optional<int32_t> stop_token_id;     // the stop token (not EOS) that ended it
  std::optional<Usage> usage;               // on the request's last event
  std::optional<RequestFailure> error;
  bool done = false;                        // no more events for this request
};

// The final event of a request that failed.
RequestEvent error_event(RequestFailure failure);

// The number of output tokens a request may produce: max_tokens, or up to max_model_len when
// unset. Throws RequestError(400, "invalid_request_error", param "max_tokens" or "messages")
// when the prompt plus max_tokens exceeds max_model_len, with the message vLLM gives.
int resolve_max_tokens(int64_t num_prompt_tokens, std::optional<int> max_tokens, int64_t max_model_len);

}  // namespace vlm

// Engine::Request: the engine's record of one live request (internal to engine*.cpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "engine/engine.h"

namespace vlm {

struct Engine::Request {
  GenerationRequest req;
  std::shared_ptr<RequestChannel> channel;
  int max_tokens = 0;
  std::vector<std::unique_ptr<Sequence>> seqs;     // by choice index; children join at fork
  std::vector<std::unique_ptr<OutputText>> texts;  // by choice index
  int num_finished = 0;
  std::chrono::steady_clock::time_point added_at = std::chrono::steady_clock::now();  // add_request
  // The debug timeline of choice 0's prefill (log_first_token): steps with a prefill chunk of it,
  // their wall time up to the sample, and the media encoding they did (a step's encode time goes to
  // each of its media-bearing prefill chunks; on the GPU the span between events around the tower
  // calls, which work of other streams running beside it lengthens). LOOK-M's end of prefill runs
  // inside the last prefill step (the line's "its step").
  int prefill_steps = 0;
  double prefill_steps_ms = 0, media_encode_ms = 0;

  Usage usage() const {
    Usage u;
    u.prompt_tokens = static_cast<int64_t>(req.prompt_ids.size());
    for (const auto& s : seqs) {
      u.completion_tokens += s->num_output_tokens();
      u.sink_groups_routed += s->sink_anchors.groups_routed;
      u.sink_groups_skipped += s->sink_anchors.groups_skipped;
    }
    if (!seqs.empty()) {  // choice 0 prefilled (and compressed) the prompt
      u.cached_tokens = std::max<int64_t>(0, seqs.front()->num_prefix_cached_tokens);
      u.look_m_kv_tokens_before = seqs.front()->look_m_kv_tokens_before;
      u.look_m_kv_tokens_kept = seqs.front()->look_m_kv_tokens_after;
      u.prefill_blocks_computed = seqs.front()->sparse_prefill_blocks.computed;
      u.prefill_blocks_causal = seqs.front()->sparse_prefill_blocks.causal;
    }
    return u;
  }
};

}  // namespace vlm

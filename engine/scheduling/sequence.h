// Sequence: the plain state of one generated sequence (one choice of a request), with derived
// getters. The scheduler moves it between queues, the block manager edits its block table, the
// engine appends sampled tokens. Nothing here allocates KV memory.
//
// Two lengths: `num_computed_tokens` is logical (tokens whose KV was computed; the RoPE position
// of the next token; what usage counts), `num_cached_tokens` is physical (cache slots in use).
// They are equal until KV compaction (LOOK-M) trims the cache; then cached < computed.
#pragma once

#include <cstdint>
#include <climits>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "engine/media_inputs.h"
#include "engine/scheduling/block_hash.h"
#include "engine/sampling/sampling_params.h"
#include "kernels/attention/block_sparse_plan.h"
#include "kernels/sparse_prefill/sparse_prefill_config.h"
#include "kernels/kv_compression/look_m_params.h"
#include "model/methods/look_m_state.h"
#include "model/decoder/modality.h"
#include "model/methods/sink_anchors.h"

namespace vlm {

struct DeviceEmbeddings;  // model/decoder/llm_decoder.h

enum class SequenceStatus { Waiting, Running, Finished };

// Why a sequence ended (the OpenAI finish_reason, plus abort and error).
enum class FinishReason { None, Stop, Length, Abort, Error };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "abort", "error", "none"

struct Sequence {
  // `prompt_modalities`: one tag per prompt token, or empty for an all-text prompt.
  Sequence(int64_t id, std::vector<int32_t> prompt, SamplingParams params,
           std::vector<ModalityTag> prompt_modalities = {});

  int64_t id = 0;
  int64_t group_id = 0;               // shared by the n choices of one request (default: id)
  int index = 0;                      // choice index within its request (n > 1)
  std::vector<int32_t> token_ids;     // [num_prompt_tokens + outputs]
  int32_t num_prompt_tokens = 0;
  std::vector<ModalityTag> prompt_modalities;  // [num_prompt_tokens] or empty (all text)
  std::shared_ptr<const MediaInputs> media;  // null: no media; shared by the request's choices
  // The encoder's outputs for `media` ([N, Ti, planes * C]: Model::embedding_planes): set by the ModelRunner when a chunk needs
  // them and dropped once the chunk holding the last media token has run (a recompute after a
  // preemption encodes again).
  std::shared_ptr<const std::vector<float>> media_embeds;
  // The same, encoded on the backend's device (StepBackend::encodes_media): host row r of the
  // layout above is device row r + media_device_shift of media_embeds_device.
  std::shared_ptr<const DeviceEmbeddings> media_embeds_device;
  int64_t media_device_shift = 0;
  int32_t num_computed_tokens = 0;    // logical length computed (next RoPE position)
  int32_t num_cached_tokens = 0;      // physical cache slots in use
  std::vector<int32_t> block_table;   // [ceil(num_cached_tokens / B)] block ids
  SequenceStatus status = SequenceStatus::Waiting;
  FinishReason finish_reason = FinishReason::None;
  SamplingParams params;
  std::mt19937_64 rng;                // this sequence's sampling RNG (seeded per request)
  uint32_t constraint_state = 0;      // params.constraint's state after the outputs so far
  int num_forks_pending = 0;          // children (n - 1) still to fork at the end of prefill
  int num_preemptions = 0;
  LookMSetting look_m;                       // resolved: the request's override or the server's
  std::unique_ptr<LookMState> look_m_state;  // while a LOOK-M prefill runs (KVCompressor)
  int32_t look_m_kv_tokens_before = 0;       // cache tokens before / after the last compaction
  int32_t look_m_kv_tokens_after = 0;        // (0: never compressed)
  BlockCounts sparse_prefill_blocks;         // key blocks of its sparse-prefilled chunks (all layers)
  GridLayoutStore sparse_grid_layouts;       // grid layouts searched once per prompt (grid_search_once)
  SinkAnchors sink_anchors;           // SinkRouter anchors and counters (empty unless routed)
  // Prefix caching (BlockManager; block_hash.h). The engine sets the policy from the request:
  // a sequence whose K/V is not the exact path's for its tokens (LOOK-M compacts it; sparse
  // prefill and SinkRouter-routed decode approximate it) never publishes those blocks, and a
  // LOOK-M sequence does not read the cache either (its scores need the whole prompt).
  bool reads_prefix_cache = true;
  int32_t prefix_cache_publish_limit = INT32_MAX;  // only blocks wholly below this token may be published
  BlockHash prefix_cache_seed;        // the chain's seed (prefix_cache_seed(cache_salt))
  std::vector<BlockHash> block_hashes;  // [full blocks of token_ids hashed so far]
  int32_t num_published_blocks = 0;   // leading table blocks already offered to the cache
  int32_t num_prefix_cached_tokens = -1;  // tokens taken from the cache at the first admission
                                          // (usage cached_tokens); -1 until admitted

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  int32_t num_uncomputed_tokens() const { return num_tokens() - num_computed_tokens; }
  std::span<const int32_t> prompt_ids() const { return {token_ids.data(), static_cast<size_t>(num_prompt_tokens)}; }
  std::span<const int32_t> output_ids() const {
    return {token_ids.data() + num_prompt_tokens, static_cast<size_t>(num_output_tokens())};
  }
  int32_t last_token() const { return token_ids.back(); }
  bool is_finished() const { return status == SequenceStatus::Finished; }
  // Modality of token `pos` (outputs are text).
  ModalityTag modality(int32_t pos) const {
    return pos < static_cast<int32_t>(prompt_modalities.size()) ? prompt_modalities[pos] : ModalityTag{};
  }
  // Whether a chunk of n tokens starting at num_computed_tokens is prefill. A decode is exactly
  // one token, the last one, past the prompt; anything else (prompt tokens, or the recompute of
  // outputs after a preemption) is prefill.
  bool chunk_is_prefill(int32_t n) const {
    return !(n == 1 && num_computed_tokens + 1 == num_tokens() && num_computed_tokens >= num_prompt_tokens);
  }
};

}  // namespace vlm

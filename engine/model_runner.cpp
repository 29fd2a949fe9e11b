#include "engine/model_runner.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "kernels/core/check.h"

namespace vlm {
namespace {

void fill_sparse_prefill(const SchedulerOutput& out, const SparsePrefillConfig& dflt, ForwardBatch& fb) {
  const size_t S = out.chunks.size();
  for (size_t s = 0; s < S; ++s) {
    const ScheduledChunk& c = out.chunks[s];
    const Sequence& seq = *c.seq;
    SparsePrefillConfig cfg = dflt;
    cfg.method = seq.params.sparse_prefill.value_or(dflt.method);
    if (!cfg.enabled() || c.num_tokens <= 1 || seq.num_prompt_tokens < cfg.min_prompt_len) continue;
    if (fb.sparse_prefill.empty()) {
      fb.sparse_prefill.assign(S, SparsePrefillConfig{});  // method Off
      fb.prompt_lens.assign(S, 0);
      fb.prompt_modalities.assign(S, {});
      fb.frame_strides.assign(S, {});
      fb.sparse_block_counts.assign(S, nullptr);
      fb.grid_layouts.assign(S, nullptr);
    }
    fb.sparse_prefill[s] = cfg;
    fb.sparse_block_counts[s] = &c.seq->sparse_prefill_blocks;
    fb.grid_layouts[s] = &c.seq->sparse_grid_layouts;
    // cache position i holds prompt token i while the prompt is being prefilled (LOOK-M
    // compacts only once prefill is over)
    if (c.cache_start == c.start) fb.prompt_modalities[s] = seq.prompt_modalities;
    // the grid pattern's known strides: tokens per frame of each video of the prompt
    if (seq.media) fb.frame_strides[s] = seq.media->video_frame_tokens;
    // the prompt's end in cache positions (cache and logical positions differ after compaction)
    fb.prompt_lens[s] = seq.num_prompt_tokens - (c.start - c.cache_start);
  }
}

// M-RoPE (Qwen2-VL family): when a sequence of the batch carries the positions of its prompt,
// every row gets three positions: a prompt token its computed (t, h, w); a later token (decode,
// or an output recomputed after preemption) at logical position p gets p + rope_delta on all
// three axes, as transformers' generate() does; sequences without them get (p, p, p), which is
// what 1-D RoPE computes.
void fill_mrope_positions(const SchedulerOutput& out, ForwardBatch& fb) {
  bool any = false;
  for (const ScheduledChunk& c : out.chunks) any = any || (c.seq->media && c.seq->media->mrope);
  if (!any) return;
  fb.mrope_positions.resize(3 * fb.positions.size());
  size_t row = 0;
  for (const ScheduledChunk& c : out.chunks) {
    const MropePositions* m = c.seq->media ? (c.seq->media->mrope ? &*c.seq->media->mrope : nullptr) : nullptr;
    const auto L = m ? static_cast<int32_t>(m->positions.size() / 3) : 0;
    for (int32_t i = 0; i < c.num_tokens; ++i, ++row) {
      const int32_t pos = c.start + i;
      int32_t* dst = fb.mrope_positions.data() + 3 * row;
      if (m && pos < L) {
        std::copy_n(m->positions.data() + 3 * static_cast<size_t>(pos), 3, dst);
      } else {
        const int32_t p = pos + (m ? m->rope_delta : 0);
        dst[0] = dst[1] = dst[2] = p;
      }
    }
  }
}

}  // namespace

ModelRunner::ModelRunner(const Model& model, StepBackend& backend, int block_size)
    : decoder_(model.decoder()),
      backend_(backend),
      block_size_(block_size),
      multimodal_(model.has_media() ? &model : nullptr) {}

ForwardBatch ModelRunner::make_batch(const SchedulerOutput& out, int block_size,
                                     const SparsePrefillConfig* sparse) {
  ForwardBatch fb;
  const size_t S = out.chunks.size();
  for (const ScheduledChunk& c : out.chunks)
    fb.max_blocks_per_seq = std::max(fb.max_blocks_per_seq, static_cast<int>(c.seq->block_table.size()));
  fb.token_ids.reserve(static_cast<size_t>(out.num_batched_tokens));
  fb.positions.reserve(fb.token_ids.capacity());
  fb.slot_mapping.reserve(fb.token_ids.capacity());
  fb.modalities.reserve(fb.token_ids.capacity());
  fb.cu_seqlens_q.push_back(0);
  fb.block_tables.assign(S * static_cast<size_t>(fb.max_blocks_per_seq), -1);
  for (size_t s = 0; s < S; ++s) {
    const ScheduledChunk& c = out.chunks[s];
    const Sequence& seq = *c.seq;
    const int32_t cache_end = c.cache_start + c.num_tokens;
    VLM_CHECK(c.num_tokens > 0 && c.start + c.num_tokens <= seq.num_tokens(),
              "sequence {}: chunk [{}, +{}) of {} tokens", seq.id, c.start, c.num_tokens, seq.num_tokens());
    VLM_CHECK(static_cast<int64_t>(seq.block_table.size()) * block_size >= cache_end,
              "sequence {}: {} blocks for {} cache slots", seq.id, seq.block_table.size(), cache_end);
    for (int32_t i = 0; i < c.num_tokens; ++i) {
      const int32_t pos = c.start + i, slot = c.cache_start + i;
      fb.token_ids.push_back(seq.token_ids[pos]);
      fb.positions.push_back(pos);
      fb.slot_mapping.push_back(seq.block_table[slot / block_size] * block_size + slot % block_size);
      fb.modalities.push_back(seq.modality(pos));
    }
    const int32_t first = fb.cu_seqlens_q.back();
    if (c.samples) fb.logits_indices.push_back(first + c.num_tokens - 1);
    fb.cu_seqlens_q.push_back(first + c.num_tokens);
    fb.context_lens.push_back(cache_end);
    fb.finishes_prefill.push_back(c.finishes_prefill ? 1 : 0);
    if (c.is_prefill && seq.look_m_state) {  // LOOK-M work for this chunk's layers
      fb.look_m.resize(s, nullptr);
      fb.look_m.push_back(seq.look_m_state.get());
    }
    std::copy(seq.block_table.begin(), seq.block_table.end(),
              fb.block_tables.begin() + static_cast<int64_t>(s) * fb.max_blocks_per_seq);
  }
  if (!fb.look_m.empty()) fb.look_m.resize(S, nullptr);
  fill_mrope_positions(out, fb);
  if (sparse) fill_sparse_prefill(out, *sparse, fb);
  return fb;
}

namespace {

// Whether the chunk covers any of its sequence's media tokens.
bool chunk_has_media(const ScheduledChunk& c) {
  const MediaInputs* m = c.seq->media.get();
  return m && m->num_images() > 0 && c.start < m->end() && c.start + c.num_tokens > m->begin();
}

}  // namespace

double ModelRunner::take_encode_ms() {
  const double ms = host_encode_ms_ + backend_.take_media_encode_ms();
  host_encode_ms_ = 0;
  return ms;
}

void ModelRunner::encode_media(const SchedulerOutput& out) {
  // Per sequence: the first item it still needs. Items wholly before the chunk are in the cache
  // already (a prefix-cache hit, or earlier chunks): they are not encoded again.
  std::vector<std::pair<Sequence*, size_t>> todo;
  std::vector<const MediaPixels*> items;
  std::vector<std::shared_ptr<const void>> owners;  // the items' MediaInputs
  int64_t rows = 0;
  for (const ScheduledChunk& c : out.chunks)
    if (chunk_has_media(c) && !c.seq->media_embeds && !c.seq->media_embeds_device &&
        std::none_of(todo.begin(), todo.end(), [&](const auto& t) { return t.first == c.seq; })) {
      const MediaInputs& m = *c.seq->media;
      size_t k0 = 0;
      while (m.first_token[k0] + m.num_tokens[k0] <= c.start) ++k0;  // chunk_has_media: some item ends later
      todo.emplace_back(c.seq, k0);
      owners.push_back(c.seq->media);
      for (size_t k = k0; k < m.images.size(); ++k) items.push_back(&m.images[k]);
      rows += m.total_tokens() - m.embed_row[k0];
    }
  if (todo.empty()) return;
  VLM_CHECK(multimodal_ != nullptr, "sequence {} has media, and the model has no media encoder", todo[0].first->id);
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t planes = multimodal_->embedding_planes();
  const int64_t C = decoder_.config().hidden_size * planes;  // a row: its planes side by side
  if (backend_.encodes_media()) {  // rows [rows, C] (every plane) stay in the backend's memory
    std::shared_ptr<const DeviceEmbeddings> dev = backend_.encode_media(items, std::move(owners));
    VLM_CHECK(dev && dev->rows == rows, "backend encoded {} media rows, {} expected", dev ? dev->rows : -1, rows);
    int64_t first = 0;
    for (const auto& [seq, k0] : todo) {
      const MediaInputs& m = *seq->media;
      seq->media_embeds_device = dev;
      seq->media_device_shift = first - m.embed_row[k0];
      first += m.total_tokens() - m.embed_row[k0];
    }
    num_images_encoded_ += static_cast<int64_t>(items.size());
    encode_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return;
  }
  std::vector<float> all(static_cast<size_t>(rows * C));  // [sum tokens, planes * hidden]
  const auto h0 = std::chrono::steady_clock::now();
  multimodal_->encode_media(items, all.data());
  host_encode_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - h0).count();
  int64_t first = 0;
  for (const auto& [seq, k0] : todo) {
    // [total_tokens, C] as gather_media indexes it; the rows of skipped items stay zero (unread).
    const MediaInputs& m = *seq->media;
    auto embeds = std::make_shared<std::vector<float>>(static_cast<size_t>(m.total_tokens() * C));
    const int64_t n = (m.total_tokens() - m.embed_row[k0]) * C;
    std::copy(all.begin() + first, all.begin() + first + n, embeds->begin() + m.embed_row[k0] * C);
    seq->media_embeds = std::move(embeds);
    first += n;
  }
  num_images_encoded_ += static_cast<int64_t>(items.size());
  encode_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

namespace {

// Calls fn(i, embed_row) for each media token of the chunk: i is the token's index in the chunk,
// embed_row its row in the sequence's media embeddings (host or device, before any device shift).
template <typename Fn>
void for_each_media_row(const ScheduledChunk& c, Fn&& fn) {
  const Sequence& seq = *c.seq;
  const MediaInputs& m = *seq.media;
  for (int32_t i = 0; i < c.num_tokens; ++i) {
    const ModalityTag tag = seq.modality(c.start + i);
    if (tag.modality == Modality::Text) continue;
    const auto k = static_cast<size_t>(tag.media_index);
    const int64_t offset = c.start + i - m.first_token[k];
    VLM_CHECK(offset >= 0 && offset < m.num_tokens[k], "sequence {}: token {} is row {} of media item {}", seq.id,
              c.start + i, offset, tag.media_index);
    fn(i, m.embed_row[k] + offset);
  }
}

}  // namespace

bool ModelRunner::gather_media(const SchedulerOutput& out, int64_t num_rows) {
  const int64_t hidden = decoder_.config().hidden_size;
  // Host rows and device rows carry every plane (DeepStack's with the input one), so a chunk that
  // cuts a media run still adds the right planes to its rows.
  const int64_t C = multimodal_ ? hidden * multimodal_->embedding_planes() : hidden;
  bool any = false;
  host_rows_ = false;
  device_runs_.clear();
  int64_t row = 0;
  for (const ScheduledChunk& c : out.chunks) {
    if (chunk_has_media(c) && c.seq->media_embeds_device) {  // runs of rows in the backend's memory
      any = true;
      const Sequence& seq = *c.seq;
      int64_t begin = INT64_MAX, end = 0;  // the rows this chunk reads
      for_each_media_row(c, [&](int32_t, int64_t embed_row) {
        begin = std::min(begin, embed_row + seq.media_device_shift);
        end = std::max(end, embed_row + seq.media_device_shift + 1);
      });
      if (end > begin) seq.media_embeds_device->ensure_rows(begin, end);
      for_each_media_row(c, [&](int32_t i, int64_t embed_row) {
        const int64_t src_row = embed_row + seq.media_device_shift;
        VLM_CHECK(src_row >= 0 && src_row < seq.media_embeds_device->rows, "device media row {} of {}", src_row,
                  seq.media_embeds_device->rows);
        const float* src = seq.media_embeds_device->data + src_row * C;  // its planes side by side
        DeviceRowRun* last = device_runs_.empty() ? nullptr : &device_runs_.back();
        if (last && last->row + last->n == row + i && last->src + last->n * C == src) ++last->n;
        else device_runs_.push_back({row + i, src, 1});
      });
    } else if (chunk_has_media(c)) {
      if (!host_rows_) {
        host_rows_ = true;
        override_embeds_.resize(static_cast<size_t>(num_rows * C));
        override_use_.assign(static_cast<size_t>(num_rows), 0);
        any = true;
      }
      const Sequence& seq = *c.seq;
      for_each_media_row(c, [&](int32_t i, int64_t embed_row) {
        const float* src = seq.media_embeds->data() + embed_row * C;
        std::copy(src, src + C, override_embeds_.begin() + (row + i) * C);
        override_use_[static_cast<size_t>(row + i)] = 1;
      });
    }
    row += c.num_tokens;
  }
  return any;
}

void ModelRunner::run(const SchedulerOutput& out) {
  for (const BlockCopy& c : out.block_copies) backend_.copy_block(c.src, c.dst);
  ForwardBatch fb = make_batch(out, block_size_, &sparse_prefill_);
  attach_sink_router(out, fb);
  encode_media(out);
  EmbeddingOverride ov;
  if (gather_media(out, fb.num_tokens())) {
    ov.num_planes = multimodal_ ? multimodal_->embedding_planes() : 1;  // host rows and device runs
    if (host_rows_) {
      ov.embeds = override_embeds_.data();
      ov.use = override_use_.data();
    }
    ov.device_runs = device_runs_.data();
    ov.num_device_runs = static_cast<int64_t>(device_runs_.size());
  }
  backend_.forward(fb, ov);
  // A sequence past its last image token needs its embeddings no more (until a recompute).
  for (const ScheduledChunk& c : out.chunks)
    if (c.seq->media && c.start + c.num_tokens >= c.seq->media->end()) {
      c.seq->media_embeds.reset();
      c.seq->media_embeds_device.reset();
    }
}

void ModelRunner::set_sink_router(bool default_on, const SinkRouterConfig& config) {
  config.validate();
  sink_default_on_ = default_on;
  sink_config_ = config;
}

// Anchor stores of routed sequences, for the chunks that capture (finishing prefill) or route
// (decode); mid-prefill chunks need neither. No routed sequence: the batch stays as it was.
void ModelRunner::attach_sink_router(const SchedulerOutput& out, ForwardBatch& fb) {
  std::vector<SinkAnchors*> stores(out.chunks.size(), nullptr);
  bool any = false;
  for (size_t s = 0; s < out.chunks.size(); ++s) {
    const ScheduledChunk& c = out.chunks[s];
    if (!c.seq->params.sink_router.value_or(sink_default_on_)) continue;
    if (c.is_prefill && !c.finishes_prefill) continue;
    stores[s] = &c.seq->sink_anchors;
    any = true;
  }
  if (!any) return;
  fb.sink_anchors = std::move(stores);
  fb.sink_router = &sink_config_;
  fb.sink_counters = &sink_counters_;
}

}  // namespace vlm

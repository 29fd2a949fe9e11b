// Media rows in place of token embeddings: the host rows a VLM splices into a batch, and the
// device-memory rows a GPU backend encoded itself.
#pragma once

#include <cstdint>

namespace vlm {

// Optional input embeddings for some rows of a batch (e.g. image tokens spliced in by a VLM):
// row t takes embeds[t, 0:C] instead of the token embedding when use[t] != 0. Both null: none.
// A row may carry more planes than the input one (num_planes > 1: Qwen3-VL's DeepStack): embeds
// is then [T, num_planes * C], plane 0 the input embedding, plane p (1 <= p < num_planes) what the
// decoder adds to that row's hidden state after layer p - 1 (RowOps::add_override_plane).
// A backend may instead hold the media rows in its own memory (the GPU's): device_runs lists
// runs of rows [row, row + n) of the batch taking src[0 .. n) ([n, num_planes * C] f32 in that
// memory, the planes side by side as in embeds); only a backend that made them reads them (the
// CPU decoder rejects them).
struct DeviceRowRun {
  int64_t row = 0;
  const float* src = nullptr;
  int64_t n = 0;
};
struct EmbeddingOverride {
  const float* embeds = nullptr;  // [T, num_planes * C]
  const uint8_t* use = nullptr;   // [T]
  int64_t num_planes = 1;         // planes per row of embeds and of the device runs' src
  const DeviceRowRun* device_runs = nullptr;
  int64_t num_device_runs = 0;
};

// Media embeddings a backend encoded into its own memory: rows [rows, C] f32 at data (device
// memory), freed with the object.
struct DeviceEmbeddings {
  virtual ~DeviceEmbeddings() = default;
  // Makes rows [begin, end) valid, in stream order before the next forward: a backend may encode
  // a long item's rows on demand, a group of frames at a time (the rest of the object's contract
  // holds for the rows made valid). The default: all rows are valid from the start.
  virtual void ensure_rows(int64_t /*begin*/, int64_t /*end*/) const {}
  const float* data = nullptr;
  int64_t rows = 0;
};

}  // namespace vlm

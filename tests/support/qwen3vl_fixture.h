// The Qwen3-VL fixture (tests/fixtures/qwen3vl, made by tools/fixtures/make_qwen3_vl_fixtures.py
// with transformers 5.17): the tiny model, its references and the cases, with each case's media
// items as the engine takes them (HF's pixel rows; a video split into its temporal groups).
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/decoder/embedding_override.h"
#include "model/decoder/forward_batch.h"
#include "model/decoder/safetensors.h"
#include "model/families/multimodal_input.h"
#include "model/families/qwen3_vl.h"
#include "model/media/media_pixels.h"

namespace vlm::testing {

std::string qwen3vl_fixture_dir();  // tests/fixtures/qwen3vl
std::string qwen3vl_model_dir();    // .../qwen3_vl_tiny
bool qwen3vl_fixture_present();

struct Qwen3VLCase {
  int k = 0;
  std::string text, rendered;
  std::vector<std::string> images, videos;  // media names, prompt order within each kind
  std::vector<double> fps;                  // per video
  std::vector<std::vector<int>> frames_indices;
};
std::vector<Qwen3VLCase> qwen3vl_cases();  // cases.json, up to the first case the run failed to make

struct Qwen3VLReference {
  std::unique_ptr<SafetensorsFile> file;
  bool has(const std::string& n) const;
  std::vector<int32_t> ints(const std::string& n) const;
  std::vector<float> floats(const std::string& n) const;
  std::vector<std::array<int32_t, 3>> grids(const std::string& n) const;  // empty when absent
};
Qwen3VLReference qwen3vl_reference();                              // qwen3vl_model_dir()'s
Qwen3VLReference qwen3vl_reference(const std::string& model_dir);  // DIR/reference.safetensors

// Case k's media items in prompt order as the engine takes them: HF's image_pixels per image,
// each video's video_pixels split by model.split_video into its temporal groups; and the tagged
// prompt of p<k>.ids over them (expand_media_tokens, the expanded form).
struct Qwen3VLPromptItems {
  std::vector<MediaPixels> items;
  MultimodalPrompt prompt;
};
Qwen3VLPromptItems qwen3vl_prompt_items(const Qwen3VLModel& model, const Qwen3VLReference& ref, int k);

// The fixture's raw media (media.safetensors): "img.<name>" (one frame) or "vid.<name>" (the
// sampled frames), 8-bit RGB.
std::vector<RgbImage> qwen3vl_media_frames(const std::string& name);
// Case k's media items in prompt order made from the raw frames in the Frames8 form (the CUDA
// backend's: images by qwen2vl_frames8, videos by qwen3vl_video_frames8 split into their groups,
// with the fixture's processor settings; our preprocessing, within 2 levels of HF's where
// resampled, with HF's grids), and the tagged prompt of p<k>.ids over them.
Qwen3VLPromptItems qwen3vl_frames8_items(const Qwen3VLModel& model, const Qwen3VLReference& ref, int k);

// One forward step of a decoder: the batch (block tables from qwen3vl_run's cache of
// qwen3vl_run_blocks(L, n) blocks), the embedding override (media rows with their planes; empty
// for decode steps), and the logits out ([logit rows, V]).
using Qwen3VLStep = std::function<void(const ForwardBatch&, const EmbeddingOverride&, std::vector<float>&)>;
// KV blocks (of 16 tokens) qwen3vl_run's tables use for a prompt of L tokens and n decode steps.
int64_t qwen3vl_run_blocks(int64_t L, int n);

// Case k of `ref` through `model`: prefill in chunks of `chunk` tokens (media rows with their
// planes from the override, encoded by the CPU's tower), then n greedy decode steps with
// positions p + rope_delta; each step on the CPU's decoder, or through `step` where given (e.g.
// a CudaDecoder with a cache of at least qwen3vl_run_blocks blocks of 16).
// Returns the generated tokens; rows gets the logits of every prompt row, [L * V].
std::vector<int32_t> qwen3vl_run(const Qwen3VLModel& model, const Qwen3VLReference& ref, int k, int chunk, int n,
                                 std::vector<float>& rows, const Qwen3VLStep& step = {});

}  // namespace vlm::testing

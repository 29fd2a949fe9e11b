// One media item of a request (an image, or a video as a list of frames) in the layout its
// model's encoder takes, with what the prompt and M-RoPE need to know about it.
//
// Two forms (`form`):
//   - Rows (every family): `data` holds the preprocessed values (LLaVA: pixel_values [3, H, W];
//     Qwen2-VL family: patch rows [P, K]). `frames` is empty.
//   - Frames8 (Qwen2-VL family and Qwen3-VL; server/media/qwen2vl_media_loader.h and
//     qwen3vl_media_loader.h make it for the CUDA backend): `frames` holds the sampled frames as
//     decoded, 8-bit RGB of one size, and `preprocess` the processor settings; `data` is EMPTY.
//     The rows are what qwen2vl_preprocess_to(frames, preprocess, height, width) gives
//     (model/media/qwen2vl_frames.h: qwen2vl_frames_rows is the CPU reference; the GPU makes them
//     per encode unit, model/vision/cuda/cuda_frame_preprocessor.h). height/width are the resize
//     target, grid_thw the grid of the rows. Readers of `data` either handle this form or refuse
//     it by name (Qwen2VLModel and Qwen3VLModel convert it on the CPU; LLaVA's checks refuse an
//     item without values).
// In both forms, modality / grid_thw / second_per_grid / num_frames mean the same.
//
// source_key: when set (has_source_key), the identity of the source bytes and of everything that
// changes the preprocessed result (engine/scheduling/block_hash.h: media_item_key uses it instead
// of walking the pixels). Loaders that know the bytes set it; otherwise the key hashes pixels.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "model/decoder/modality.h"
#include "model/media/image_decode.h"
#include "model/media/qwen2vl_preprocess.h"

namespace vlm {

enum class PixelForm : uint8_t { Rows, Frames8 };

struct MediaPixels {
  // (The first members keep their order: callers build Rows items as {data, height, width}.)
  // Rows: LLaVA: pixel_values [3, H, W] (model/image_preprocess). Qwen2-VL family: patch rows
  // [P, K], P = t * h * w of grid_thw, K = 3 * temporal_patch_size * 14 * 14
  // (model/qwen2vl_preprocess). Frames8: empty.
  std::vector<float> data;
  int height = 0;  // LLaVA: pixel rows H (Qwen2-VL: the resized frame's pixel rows)
  int width = 0;   // LLaVA: pixel columns W (Qwen2-VL: the resized frame's pixel columns)
  Modality modality = Modality::Image;       // Image or Video
  std::array<int32_t, 3> grid_thw{0, 0, 0};  // Qwen2-VL family: (t, h, w) in patches; zeros: LLaVA
  float second_per_grid = 1.0f;  // video: seconds per temporal grid step (temporal_patch_size / fps)
  int32_t num_frames = 0;        // video: frames given (before padding to temporal_patch_size)
  // Qwen3-VL video: each temporal group's time in seconds (the "<t seconds>" its prompt writes
  // before the group; model/media/qwen3vl_video.h); empty otherwise.
  std::vector<double> group_seconds;
  // Qwen3-VL video item as the engine takes it (one temporal group, qwen3vl_split_video): the
  // group's index in its video (0, 1, ...), so that the engine sees consecutive groups as one
  // video (engine/media_inputs.h, video_token_spans); -1 for an image or a whole video. Not part
  // of the item's identity (media_item_key): a group encodes the same at any index.
  int32_t video_group = -1;

  PixelForm form = PixelForm::Rows;

  // Frames8 only: [n] frames (n = num_frames for a video, 1 for an image), each [H0, W0, 3]
  // 8-bit RGB of one size; padded to a multiple of preprocess.temporal_patch_size by repeating
  // the last when the rows are made. Rows: empty.
  std::vector<RgbImage> frames;
  Qwen2VLPreprocessConfig preprocess;  // Frames8 only: the settings the rows are made with

  bool has_source_key = false;
  std::array<uint64_t, 2> source_key{0, 0};  // see above (a BlockHash's lo, hi)

  bool is_frames8() const { return form == PixelForm::Frames8; }
};

}  // namespace vlm

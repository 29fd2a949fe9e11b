// The Frames8 form of a Qwen2-VL-family or Qwen3-VL media item (model/media/media_pixels.h): the
// sampled frames kept as decoded 8-bit RGB plus the processor settings and the resize target
// (height x width), the rows made later (on the GPU per encode unit,
// model/vision/cuda/cuda_frame_preprocessor.h, for CudaQwen2VisionRunner and
// CudaQwen3VLVisionRunner; on the CPU by qwen2vl_frames_rows, the reference, bit-identical to
// qwen2vl_preprocess_to of the same frames at that target: qwen2vl_preprocess for Qwen2-VL's
// items, whose target is qwen2vl_output_size; Qwen3-VL's videos take their own rule's target,
// model/media/qwen3vl_video.h: qwen3vl_video_frames8).
#pragma once

#include <cstdint>
#include <vector>

#include "model/media/media_pixels.h"
#include "model/media/qwen2vl_preprocess.h"

namespace vlm {

// What the GPU preprocessing reserves for (and so what it takes): frames of at most
// kFrames8MaxSide pixels a side and kFrames8MaxPixels pixels, resized to a target within the same
// bounds, with the horizontal pass's intermediate (target width x source height) within them too.
// A bigger item is kept in the Rows form (preprocessed on the CPU).
constexpr int kFrames8MaxSide = 8192;
constexpr int64_t kFrames8MaxPixels = int64_t{1} << 22;  // 4,194,304 (2560x1440 fits; 3840x2160 does not)
bool frames8_fit(int in_w, int in_h, int out_w, int out_h);

// frames (one image or a video's sampled frames, all of one size) -> a Frames8 item: the size and
// grid qwen2vl_preprocess would give (height/width = the resize target), num_frames = the frame
// count for a video (0 for an image), frames moved in. Throws RequestError (400) as
// qwen2vl_preprocess does.
MediaPixels qwen2vl_frames8(std::vector<RgbImage> frames, const Qwen2VLPreprocessConfig& cfg, Modality modality);
// The same with the resize target given (out_h x out_w, positive multiples of patch_size *
// merge_size; cfg.do_resize not read): the rows are qwen2vl_preprocess_to(frames, cfg, out_h,
// out_w). Throws RequestError (400) as qwen2vl_preprocess_to.
MediaPixels frames8_item(std::vector<RgbImage> frames, const Qwen2VLPreprocessConfig& cfg, Modality modality,
                         int out_h, int out_w);

// The prompt tokens of a Qwen2-VL-family media item for a tower of these patch settings:
// t * h * w / merge^2 of its grid_thw. The item is an image (t = 1) or a video whose grid is a
// positive multiple of the merge size, in the Rows form with patch_dim values a patch, or in the
// Frames8 form whose settings are the tower's and whose frame count and size give the grid.
// Throws RequestError (400, param "messages", the message naming "<modality> <k>") otherwise.
// Qwen2VLModel::media_tokens and Qwen3VLModel::media_tokens.
int64_t qwen2vl_item_tokens(const MediaPixels& item, int k, int patch_size, int temporal_patch_size, int merge_size,
                            int64_t patch_dim);

// CPU reference: the patch rows [(t1 - t0) * h * w, K] of temporal groups [t0, t1) of a Frames8
// item (its frames [t0 * tp, t1 * tp), the last repeated past the end), equal to rows
// [t0 * h * w, t1 * h * w) of qwen2vl_preprocess_to(item.frames, item.preprocess, item.height,
// item.width) (for a Qwen2-VL item: of qwen2vl_preprocess(item.frames, item.preprocess)).
std::vector<float> qwen2vl_frames_rows(const MediaPixels& item, int32_t t0, int32_t t1);
// The Rows form of any item (a Frames8 item through qwen2vl_frames_rows; a Rows item copied).
MediaPixels to_rows_form(const MediaPixels& item);

}  // namespace vlm

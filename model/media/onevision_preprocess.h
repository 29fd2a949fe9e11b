// LLaVA-OneVision's image and video processors on the CPU (transformers 5.17
// LlavaOnevisionImageProcessorPil / LlavaOnevisionVideoProcessor), from the checkpoint's
// processor files in either layout (read_processor_section).
//   image: the base tile (the whole image resized to S x S), then the AnyRes tiles: the image
//     resized with its aspect into the best grid pinpoint (model/media/anyres.h), centered on a
//     black canvas of the pinpoint's size (left/top padding floored), cut into S x S tiles
//     row-major; every tile rescaled and normalized -> data [1 + tiles, 3, S, S].
//   video: each frame resized to S x S -> data [F, 3, S, S].
// Resizes are PIL's bicubic (model/media/image_preprocess.h), bit-exact with the PIL-backend image
// processor; transformers' default (torchvision) image backend and its video processor resize
// within a couple of levels of PIL; frames already S x S are not resized at all.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/media/anyres.h"
#include "model/media/image_decode.h"
#include "model/media/image_preprocess.h"
#include "model/media/media_pixels.h"

namespace vlm {

// The processor section `key` ("image_processor" or "video_processor") of a checkpoint: the
// separate file (preprocessor_config.json / video_preprocessor_config.json) when it exists, else
// the section nested in transformers 5's processor_config.json. Throws LoadError naming the files
// when neither holds it.
nlohmann::json read_processor_section(const std::string& model_dir, const std::string& key);

struct OnevisionPreprocessConfig {
  int size = 384;                       // S: the tile side (size.height == size.width)
  std::vector<Resolution> grid_pinpoints;  // empty for the video processor
  ImagePreprocessConfig norm;           // rescale / normalize flags and mean / std (no resize/crop)

  // Throws LoadError (naming `source`) for a non-square or missing size, resample other than
  // bicubic, or malformed pinpoints.
  static OnevisionPreprocessConfig from_json(const nlohmann::json& j, const std::string& source);
  static OnevisionPreprocessConfig load(const std::string& model_dir, bool video);
};

// One image -> MediaPixels (Image; height/width: the original size).
MediaPixels preprocess_onevision_image(const RgbImage& img, const OnevisionPreprocessConfig& cfg);
// Frames (one size) -> MediaPixels (Video; num_frames).
MediaPixels preprocess_onevision_video(const std::vector<RgbImage>& frames, const OnevisionPreprocessConfig& cfg);

}  // namespace vlm

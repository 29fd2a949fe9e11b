// The GPU vision tests' inputs (test_cuda_vision_towers.cpp, test_cuda_vision_runners.cpp): the
// fixtures' prompts as media items, and a tower's rows for them.
#pragma once

#include <string>
#include <vector>

#include "model/decoder/safetensors.h"
#include "model/media/media_pixels.h"
#include "model/vision/cuda/cuda_vision_tower.h"

namespace vlm::testing {

// The f32 tensor `name` of f.
std::vector<float> floats(const SafetensorsFile& f, const std::string& name);

// Encodes items on the tower (reserved for exactly their cost) and downloads the rows.
std::vector<float> encode_on_gpu(CudaVisionTower& tower, const std::vector<MediaPixels>& items);

// As encode_on_gpu through upload_pixels() + run() (f32 pixels on the GPU, one call).
std::vector<float> run_on_gpu(CudaVisionTower& tower, const std::vector<MediaPixels>& items);

// One reference embedding of a fixture: its name in reference.safetensors and the items encoded.
struct VisionCase {
  std::string name;
  std::vector<MediaPixels> items;
};

// The Qwen2-VL fixtures' prompts: an image, a video, two images and a video
// (bench/gpu/hf_bf16_vision.py feeds HF the same).
std::vector<VisionCase> qwen2_cases();

// The LLaVA fixtures' prompts (1-3 images): HF's pixel_values [N, 3, S, S] with the prompt, or
// (the 336 model) in the preprocess file.
std::vector<VisionCase> clip_cases(const SafetensorsFile& ref, int64_t S);

}  // namespace vlm::testing

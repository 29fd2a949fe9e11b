#include "tests/model/vision/cuda/cuda_vision_cases.h"

#include "kernels/core/check.h"
#include "kernels/cuda/core/device_buffer.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace vlm::testing {
namespace {
const std::string kFix = VLM_FIXTURES_DIR;
}  // namespace

std::vector<float> floats(const SafetensorsFile& f, const std::string& name) {
  const TensorView& t = f.tensors().at(name);
  return {t.as<const float>(), t.as<const float>() + t.numel()};
}

namespace {
// The items' rows from the tower, reserved for exactly their cost: through encode(), or through
// upload_pixels() then run() (the engine's two-phase path).
std::vector<float> rows_on_gpu(CudaVisionTower& tower, const std::vector<MediaPixels>& items, bool two_phase) {
  int64_t cost = 0, rows = 0;
  std::vector<const MediaPixels*> ptrs;
  for (const MediaPixels& m : items) {
    cost += tower.cost(m);
    rows += tower.out_rows(m);
    ptrs.push_back(&m);
  }
  tower.reserve(cost);
  cuda::DeviceBuffer out(static_cast<size_t>(rows * tower.out_features()) * 4);
  if (two_phase) {
    tower.upload_pixels(ptrs, nullptr);
    tower.run(ptrs, out.as<float>(), nullptr);
  } else {
    tower.encode(ptrs, out.as<float>(), nullptr);
  }
  return to_host<float>(out, static_cast<size_t>(rows * tower.out_features()));
}
}  // namespace

std::vector<float> encode_on_gpu(CudaVisionTower& tower, const std::vector<MediaPixels>& items) {
  return rows_on_gpu(tower, items, false);
}

std::vector<float> run_on_gpu(CudaVisionTower& tower, const std::vector<MediaPixels>& items) {
  return rows_on_gpu(tower, items, true);
}

// The Qwen2-VL fixtures' prompts: an image, a video, two images and a video
// (bench/gpu/hf_bf16_vision.py feeds HF the same).
std::vector<VisionCase> qwen2_cases() {
  const auto pre = SafetensorsFile::open(kFix + "/qwen2vl/preprocess.safetensors");
  const std::vector<std::vector<std::string>> images = {{"cat"}, {}, {"synth", "rocket"}};
  const std::vector<std::vector<std::string>> videos = {{}, {"shapes4"}, {"shapes4"}};
  std::vector<VisionCase> cases;
  for (size_t k = 0; k < images.size(); ++k)
    for (bool video : {false, true}) {
      VisionCase vc{"p" + std::to_string(k) + (video ? ".video_embeds" : ".image_embeds"), {}};
      for (const std::string& n : (video ? videos : images)[k]) {
        const std::string key = (video ? "vid_small." : "img_small.") + n;
        MediaPixels m;
        m.data = floats(*pre, key + ".pixels");
        const TensorView& g = pre->tensors().at(key + ".grid");
        for (int i = 0; i < 3; ++i) m.grid_thw[static_cast<size_t>(i)] = g.as<const int32_t>()[i];
        m.modality = video ? Modality::Video : Modality::Image;
        vc.items.push_back(std::move(m));
      }
      if (!vc.items.empty()) cases.push_back(std::move(vc));
    }
  return cases;
}

// The LLaVA fixtures' prompts (1-3 images): HF's pixel_values [N, 3, S, S] with the prompt, or
// (the 336 model) in the preprocess file.
std::vector<VisionCase> clip_cases(const SafetensorsFile& ref, int64_t S) {
  const auto pre = SafetensorsFile::open(kFix + "/llava/preprocess.safetensors");
  std::vector<VisionCase> cases;
  for (int k = 0; ref.tensors().count("p" + std::to_string(k) + ".proj"); ++k) {
    const std::string p = "p" + std::to_string(k);
    const bool own = ref.tensors().count(p + ".pixels") != 0;
    const TensorView& px = own ? ref.tensors().at(p + ".pixels") : pre->tensors().at("clip336.coffee.pixels");
    const int64_t N = ref.tensors().at(p + ".vision").dim(0), per = 3 * S * S;
    VLM_CHECK(px.numel() == N * per, "{}: {} pixel values for {} images", p, px.numel(), N);
    VisionCase vc{p + ".proj", {}};
    for (int64_t i = 0; i < N; ++i) {
      MediaPixels m;
      m.data.assign(px.as<const float>() + i * per, px.as<const float>() + (i + 1) * per);
      m.height = m.width = static_cast<int>(S);
      vc.items.push_back(std::move(m));
    }
    cases.push_back(std::move(vc));
  }
  return cases;
}

}  // namespace vlm::testing

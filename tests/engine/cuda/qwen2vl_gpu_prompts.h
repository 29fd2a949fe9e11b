// The Qwen2-VL fixture prompts of the GPU engine tests (test_cuda_vision_engine.cpp,
// test_cuda_tensor_parallel_media.cpp): an image, a video, two images and a video, with HF's
// expanded input_ids, pixel_values and greedy tokens; and an engine on the GPU for them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/decoder/safetensors.h"
#include "model/families/multimodal_input.h"
#include "model/families/qwen2_vl.h"
#include "tests/engine/engine_test_util.h"

namespace vlm::testing {

inline EngineConfig gpu_config(int block_size, int64_t blocks, int budget) {
  EngineConfig c = test_config(block_size, blocks, budget);
  c.device = Device::Cuda;
  return c;
}

// A Qwen2-VL fixture prompt (tests/fixtures/qwen2vl/<model>/reference.safetensors: HF's expanded
// input_ids and greedy tokens; HF's pixel_values from preprocess.safetensors), items in prompt order.
struct QwenPrompt {
  GenerationRequest request;
  std::vector<int32_t> greedy;
};

inline std::vector<QwenPrompt> qwen_prompts(const std::string& model) {
  const std::string dir = std::string(VLM_FIXTURES_DIR) + "/qwen2vl/";
  const auto cfg = Qwen2VLConfig::load(dir + model);
  const auto ref = SafetensorsFile::open(dir + model + "/reference.safetensors");
  const auto pre = SafetensorsFile::open(dir + "preprocess.safetensors");
  auto ints = [&](const SafetensorsFile& f, const std::string& name) {
    const TensorView& t = f.tensors().at(name);
    return std::vector<int32_t>(t.as<const int32_t>(), t.as<const int32_t>() + t.numel());
  };
  const std::vector<std::vector<std::string>> images = {{"cat"}, {}, {"synth", "rocket"}};
  const std::vector<std::vector<std::string>> videos = {{}, {"shapes4"}, {"shapes4"}};
  std::vector<QwenPrompt> out;
  for (size_t k = 0; k < images.size(); ++k) {
    const std::string p = "p" + std::to_string(k);
    QwenPrompt q;
    q.greedy = ints(*ref, p + ".greedy");
    q.request = greedy_request(p, ints(*ref, p + ".ids"), static_cast<int>(q.greedy.size()));
    const std::vector<int32_t>& ids = q.request.prompt_ids;
    size_t ni = 0, nv = 0;
    std::vector<MediaTokens> toks;
    for (size_t t = 0; t < ids.size(); ++t) {
      const bool im = ids[t] == cfg.image_token_id, vi = ids[t] == cfg.video_token_id;
      if ((!im && !vi) || (t > 0 && ids[t - 1] == ids[t])) continue;  // the first token of a run
      const std::string key = im ? "img_small." + images[k].at(ni++) : "vid_small." + videos[k].at(nv++);
      MediaPixels m;
      const TensorView& px = pre->tensors().at(key + ".pixels");
      m.data.assign(px.as<const float>(), px.as<const float>() + px.numel());
      const auto g = ints(*pre, key + ".grid");
      m.grid_thw = {g[0], g[1], g[2]};
      m.modality = im ? Modality::Image : Modality::Video;
      if (vi && ref->tensors().count(p + ".second_per_grid"))  // Qwen2.5-VL videos
        m.second_per_grid = ref->tensors().at(p + ".second_per_grid").as<const float>()[nv - 1];
      const int64_t per_frame = int64_t(g[1]) * g[2] / 4;
      toks.push_back({m.modality, g[0] * per_frame, per_frame});
      q.request.images.push_back(std::move(m));
    }
    q.request.prompt_modalities = expand_media_tokens(ids, cfg.image_token_id, cfg.video_token_id, toks).modalities;
    out.push_back(std::move(q));
  }
  return out;
}

inline std::unique_ptr<Engine> qwen_engine(const std::string& model, const EngineConfig& c) {
  return std::make_unique<Engine>(
      c, std::unique_ptr<Model>(Qwen2VLModel::load(std::string(VLM_FIXTURES_DIR) + "/qwen2vl/" + model)));
}

}  // namespace vlm::testing

// LLaVA's and LLaVA-OneVision's vision side over layers (model/arch/clip_vision_tower.h,
// model/arch/llava_wiring.h) against the loops they replaced (tests/support/llava_vision_loop.h):
// equal rows bit for bit — CLIP (llava_small, llava_336) and SigLIP (ov_tiny), fixture images,
// OneVision tiles and video frames, random pixels; hidden-state lists with 0, the last, repeats;
// the class row kept and dropped; f32 activations and bf16 ones where the CPU has them.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include <nlohmann/json.hpp>

#include "kernels/core/cpu_features.h"
#include "kernels/gemm/gemm.h"
#include "model/decoder/safetensors.h"
#include "model/families/llava.h"
#include "model/families/llava_onevision.h"
#include "tests/support/llava_vision_loop.h"

namespace vlm {
namespace {

const std::string kLlava = std::string(VLM_FIXTURES_DIR) + "/llava";
const std::string kOnevision = std::string(VLM_FIXTURES_DIR) + "/llava_onevision";

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> random_pixels(int64_t n, uint32_t seed) {
  std::vector<float> px(static_cast<size_t>(n));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.5f, 1.5f);
  for (float& v : px) v = u(rng);
  return px;
}

// f32 activations, then bf16 ones where the CPU has them; set back to f32 after.
template <typename F>
void each_activation_dtype(F check) {
  for (bool bf16 : {false, true}) {
    if (bf16 && !cpu_has_avx512_bf16()) continue;
    set_bf16_activations(bf16);
    check(bf16 ? " (bf16 activations)" : " (f32 activations)");
  }
  set_bf16_activations(false);
}

// The model's features and embeddings, and an encoder of every layer over hidden-state lists.
void check_model(const LlavaModel& m, const std::string& dir, const std::vector<std::vector<float>>& inputs,
                 const std::string& name) {
  const LlavaConfig& c = m.config();
  const int64_t S = c.vision.image_size, Ti = m.tokens_per_image(), L = c.vision.num_positions();
  const int64_t Cv = c.vision.hidden_size, C = c.text.hidden_size, Fin = m.projector().in_features();
  const WeightStore w = WeightStore::open(dir);
  const WeightLookup lookup = [&w](const std::string& n, const Shape& s) { return w.get(n, s); };
  std::string prefix;
  for (const char* p : {"vision_tower.vision_model.", "vision_tower."})
    if (prefix.empty() && w.has(std::string(p) + "embeddings.patch_embedding.weight")) prefix = p;
  const ClipVisionEncoder all(c.vision, lookup, prefix, c.vision.num_layers);
  const int last = static_cast<int>(c.vision.num_layers);
  const std::vector<std::vector<int>> lists = {{0}, {last}, {last, 0, 1}, {1, 1}, {last - 1}};
  for (size_t k = 0; k < inputs.size(); ++k) {
    const int64_t N = static_cast<int64_t>(inputs[k].size()) / (3 * S * S);
    const float* px = inputs[k].data();
    const std::string what = name + " input " + std::to_string(k) + " (" + std::to_string(N) + " images)";
    each_activation_dtype([&](const std::string& dt) {
      std::vector<float> a(static_cast<size_t>(N * Ti * Fin)), b(a.size());
      m.vision_features(px, N, a.data());
      testing::clip_vision_loop(m.vision(), px, N, c.feature_layers, c.drop_cls, b.data());
      EXPECT_TRUE(same(a, b)) << what << dt << ": features";
      std::vector<float> e(static_cast<size_t>(N * Ti * C)), f(e.size());
      m.encode_images(px, N, e.data());
      testing::llava_encode_images_loop(m, px, N, f.data());
      EXPECT_TRUE(same(e, f)) << what << dt << ": image embeddings";
      m.projector().forward(a.data(), N * Ti, e.data());
      testing::llava_projector_loop(m.projector(), a.data(), N * Ti, f.data());
      EXPECT_TRUE(same(e, f)) << what << dt << ": projector";
      for (const auto& list : lists)
        for (bool drop : {false, true}) {
          if (drop && c.vision.siglip) continue;
          const int64_t rows = N * (L - (drop ? 1 : 0)), cols = Cv * static_cast<int64_t>(list.size());
          std::vector<float> x(static_cast<size_t>(rows * cols), -7.0f), y(x.size(), 7.0f);
          all.encode(px, N, list, drop, x.data());
          testing::clip_vision_loop(all, px, N, list, drop, y.data());
          EXPECT_TRUE(same(x, y)) << what << dt << ": " << list.size() << " hidden states from " << list.front()
                                  << (drop ? ", class row dropped" : "");
        }
    });
  }
  if (cpu_has_avx512_bf16()) {  // the bf16 runs above took another path: their rows differ from f32's
    const int64_t N = static_cast<int64_t>(inputs[0].size()) / (3 * S * S);
    std::vector<float> a(static_cast<size_t>(N * Ti * Fin)), b(a.size());
    m.vision_features(inputs[0].data(), N, a.data());
    set_bf16_activations(true);
    m.vision_features(inputs[0].data(), N, b.data());
    set_bf16_activations(false);
    EXPECT_FALSE(same(a, b)) << name << ": bf16 activations changed no row";
  }
}

TEST(LlavaVisionOverLayers, EqualsTheLoopBitForBit) {
  for (const std::string name : {"llava_small", "llava_336"}) {
    const std::string dir = kLlava + "/" + name;
    const auto m = LlavaModel::load(dir);
    const int64_t S = m->image_size();
    std::vector<std::vector<float>> inputs;
    auto ref = SafetensorsFile::open(dir + "/reference.safetensors");
    for (const auto& [key, t] : ref->tensors())
      if (key.size() > 7 && key.substr(key.size() - 7) == ".pixels")
        inputs.emplace_back(t.as<const float>(), t.as<const float>() + t.numel());
    if (inputs.empty()) {  // the 336 model: HF's pixels of the coffee image
      auto pre = SafetensorsFile::open(kLlava + "/preprocess.safetensors");
      const TensorView& t = pre->tensors().at("clip336.coffee.pixels");
      inputs.emplace_back(t.as<const float>(), t.as<const float>() + t.numel());
    }
    inputs.push_back(random_pixels(3 * 3 * S * S, 11));
    check_model(*m, dir, inputs, name);
  }
}

TEST(LlavaOnevisionVisionOverLayers, EqualsTheLoopBitForBit) {
  const std::string dir = kOnevision + "/ov_tiny";
  const auto m = LlavaOnevisionModel::load(dir);
  ASSERT_TRUE(m->config().llava.vision.siglip);
  const int64_t S = m->tile_size();
  auto ref = SafetensorsFile::open(kOnevision + "/reference.safetensors");
  std::vector<std::vector<float>> inputs;
  const TensorView& video = ref->tensors().at("mixed.video");  // [1, F, 3, S, S] HF's frames
  inputs.emplace_back(video.as<const float>(), video.as<const float>() + video.numel());
  const TensorView& tiles = ref->tensors().at("big.levels_pil");  // [1, 17, 3, S, S] u8 pixel levels
  ASSERT_EQ(tiles.dtype, DType::U8);
  std::vector<float> t(static_cast<size_t>(tiles.numel()));
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<float>(static_cast<const uint8_t*>(tiles.data)[i]) / 127.5f - 1.0f;
  inputs.push_back(std::move(t));
  inputs.push_back(random_pixels(5 * 3 * S * S, 12));
  check_model(m->base(), dir, inputs, "ov_tiny");
}

// A tile that is not a multiple of the patch (released LLaVA-OneVision: SigLIP at 384 px with
// 14-px patches, 27 x 27 patches): the stride-p conv drops the last S % p pixels of each row and
// column, so the tower on an S + r pixel tile gives exactly its rows on the S pixel crop, with the
// same weights and the same number of positions. (ov_tiny: 40 px, 8-px patches; 44 px here.)
TEST(ClipVisionTower, ImageSizeNotAMultipleOfThePatchDropsTheRemainder) {
  const std::string dir = kOnevision + "/ov_tiny";
  const auto m = LlavaOnevisionModel::load(dir);
  const ClipVisionConfig& cfg = m->config().llava.vision;
  const int64_t S = cfg.image_size, p = cfg.patch_size, r = p / 2, S2 = S + r;
  ASSERT_GT(r, 0);
  ClipVisionConfig wide = cfg;
  wide.image_size = S2;
  ASSERT_EQ(wide.grid(), cfg.grid());
  const WeightStore w = WeightStore::open(dir);
  const WeightLookup lookup = [&w](const std::string& n, const Shape& s) { return w.get(n, s); };
  std::string prefix;
  for (const char* pre : {"vision_tower.vision_model.", "vision_tower."})
    if (prefix.empty() && w.has(std::string(pre) + "embeddings.patch_embedding.weight")) prefix = pre;
  const ClipVisionEncoder at_s(cfg, lookup, prefix, cfg.num_layers), at_s2(wide, lookup, prefix, cfg.num_layers);
  const int64_t N = 3;
  const std::vector<float> big = random_pixels(N * 3 * S2 * S2, 21);
  std::vector<float> crop(static_cast<size_t>(N * 3 * S * S));
  for (int64_t i = 0; i < N * 3; ++i)
    for (int64_t y = 0; y < S; ++y)
      std::copy(big.begin() + (i * S2 + y) * S2, big.begin() + (i * S2 + y) * S2 + S, crop.begin() + (i * S + y) * S);
  const std::vector<int> layers = {static_cast<int>(cfg.num_layers)};
  const int64_t rows = N * cfg.num_positions() * cfg.hidden_size;
  std::vector<float> a(static_cast<size_t>(rows)), b(a.size());
  at_s2.encode(big.data(), N, layers, false, a.data());
  at_s.encode(crop.data(), N, layers, false, b.data());
  EXPECT_TRUE(same(a, b));
  // The config reader takes such a size; one smaller than a patch is refused.
  nlohmann::json j = {{"model_type", "siglip_vision_model"}, {"image_size", 384}, {"patch_size", 14},
                      {"hidden_size", 1152}, {"num_attention_heads", 16}, {"hidden_act", "gelu_pytorch_tanh"}};
  EXPECT_EQ(ClipVisionConfig::from_json(j, "config.json").grid(), 27);
  j["image_size"] = 10;
  EXPECT_THROW(ClipVisionConfig::from_json(j, "config.json"), LoadError);
}

}  // namespace
}  // namespace vlm

// LLaVA's and LLaVA-OneVision's vision side over layers (model/arch/clip_vision_tower.h,
// model/arch/llava_wiring.h) against HF and against its own parts: CLIP (llava_small, llava_336)
// and SigLIP (ov_tiny); fixture images, OneVision tiles and video frames, random pixels;
// hidden-state lists with 0, the last, repeats; the class row kept and dropped; f32 activations
// and bf16 ones where the CPU has them. HF: every list and both class-row choices against HF's
// hidden states (llava_small), the features against HF's (llava_336; ov_tiny's tiles and frames),
// <= 1e-4 in f32, <= 3e-2 in bf16. Parts, bit for bit: a list's columns are its layers' single
// encodes, the dropped-class rows are the kept ones less the class row, the model's features are
// the tower's at the checkpoint's layers, its embeddings the projector over them; and (f32) the
// images of one call are the images encoded alone, within f32 rounding (1e-5). These replace the
// bit-for-bit checks against the CPU loops the layered path replaced
// (tests/support/llava_vision_loop, deleted in step 8 of docs/WRITTEN_ONCE.md).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include <nlohmann/json.hpp>

#include "kernels/core/cpu_features.h"
#include "kernels/gemm/gemm.h"
#include "model/decoder/safetensors.h"
#include "model/families/llava.h"
#include "model/families/llava_onevision.h"
#include "tests/support/decoder_harness.h"

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

// HF's rows of one input: hidden [N, NH, L, Cv] (every hidden state), or the tower's features
// [N, L - drop, Cv * layers] at `layers` (a model's own list only).
struct HfRows {
  size_t input;
  const float* hidden = nullptr;
  int64_t hidden_states = 0;       // NH
  const float* features = nullptr;  // at the model's feature_layers / drop_cls
};

// rows [N, L - drop, Cv * list.size()] from HF's hidden states [N, NH, L, Cv].
std::vector<float> from_hidden(const HfRows& h, int64_t N, int64_t L, int64_t Cv, const std::vector<int>& list,
                               bool drop) {
  const int64_t K = static_cast<int64_t>(list.size()), Lo = L - (drop ? 1 : 0);
  std::vector<float> out(static_cast<size_t>(N * Lo * Cv * K));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t t = 0; t < Lo; ++t)
      for (int64_t j = 0; j < K; ++j)
        std::copy_n(h.hidden + ((n * h.hidden_states + list[static_cast<size_t>(j)]) * L + t + (drop ? 1 : 0)) * Cv,
                    Cv, out.data() + ((n * Lo + t) * K + j) * Cv);
  return out;
}

void check_model(const LlavaModel& m, const std::string& dir, const std::vector<std::vector<float>>& inputs,
                 const std::vector<HfRows>& hf, const std::string& name) {
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
  auto encode = [&](const float* px, int64_t N, const std::vector<int>& list, bool drop) {
    std::vector<float> out(static_cast<size_t>(N * (L - (drop ? 1 : 0)) * Cv * static_cast<int64_t>(list.size())),
                           -7.0f);
    all.encode(px, N, list, drop, out.data());
    return out;
  };
  int hf_checked = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const int64_t N = static_cast<int64_t>(inputs[k].size()) / (3 * S * S);
    const float* px = inputs[k].data();
    const std::string what = name + " input " + std::to_string(k) + " (" + std::to_string(N) + " images)";
    std::vector<float> f32_features;
    each_activation_dtype([&](const std::string& dt) {
      const bool bf16 = dt.find("bf16") != std::string::npos;
      const double tol = bf16 ? 3e-2 : 1e-4;
      std::vector<float> a(static_cast<size_t>(N * Ti * Fin)), e(static_cast<size_t>(N * Ti * C)), f(e.size());
      m.vision_features(px, N, a.data());
      EXPECT_TRUE(same(a, encode(px, N, c.feature_layers, c.drop_cls))) << what << dt << ": features";
      m.encode_images(px, N, e.data());
      m.projector().forward(a.data(), N * Ti, f.data());
      EXPECT_TRUE(same(e, f)) << what << dt << ": image embeddings = projector(features)";
      if (bf16) {
        EXPECT_LE(testing::max_row_rel_error(a.data(), f32_features.data(), N * Ti, Fin), tol) << what << dt;
        EXPECT_FALSE(same(a, f32_features)) << what << ": bf16 activations changed no row";
      } else {
        f32_features = a;
      }
      // Single layers, with the class row; every list is assembled from them.
      std::vector<std::vector<float>> single(static_cast<size_t>(last + 1));
      for (int l = 0; l <= last; ++l) single[static_cast<size_t>(l)] = encode(px, N, {l}, false);
      for (const auto& list : lists)
        for (bool drop : {false, true}) {
          if (drop && c.vision.siglip) continue;
          const int64_t K = static_cast<int64_t>(list.size()), Lo = L - (drop ? 1 : 0);
          const std::vector<float> x = encode(px, N, list, drop);
          std::vector<float> y(x.size());
          for (int64_t n = 0; n < N; ++n)
            for (int64_t t = 0; t < Lo; ++t)
              for (int64_t j = 0; j < K; ++j)
                std::copy_n(single[static_cast<size_t>(list[static_cast<size_t>(j)])].data() +
                                (n * L + t + (drop ? 1 : 0)) * Cv,
                            Cv, y.data() + ((n * Lo + t) * K + j) * Cv);
          const std::string lw = what + dt + ": " + std::to_string(K) + " hidden states from " +
                                 std::to_string(list.front()) + (drop ? ", class row dropped" : "");
          EXPECT_TRUE(same(x, y)) << lw;
          for (const HfRows& h : hf)
            if (h.input == k && h.hidden != nullptr) {
              const std::vector<float> want = from_hidden(h, N, L, Cv, list, drop);
              EXPECT_LE(testing::max_row_rel_error(x.data(), want.data(), N * Lo, Cv * K), tol) << lw << " vs HF";
              ++hf_checked;
            }
        }
      for (const HfRows& h : hf)
        if (h.input == k && h.features != nullptr) {
          EXPECT_LE(testing::max_row_rel_error(a.data(), h.features, N * Ti, Fin), tol) << what << dt << " vs HF";
          ++hf_checked;
        }
      if (!bf16 && N > 1) {  // the images of one call, each encoded alone: within f32 rounding (the
                             // GEMMs' blocking follows the row count; a row that saw another image's
                             // would be off by far more)
        std::vector<float> one(static_cast<size_t>(Ti * Fin));
        for (int64_t n = 0; n < N; ++n) {
          m.vision_features(px + n * 3 * S * S, 1, one.data());
          EXPECT_LE(testing::max_row_rel_error(one.data(), a.data() + n * Ti * Fin, Ti, Fin), 1e-5)
              << what << ": image " << n << " alone";
        }
      }
    });
  }
  EXPECT_GT(hf_checked, 0) << name;
}

TEST(LlavaVisionOverLayers, MatchesHfAndItsPartsBitForBit) {
  for (const std::string name : {"llava_small", "llava_336"}) {
    const std::string dir = kLlava + "/" + name;
    const auto m = LlavaModel::load(dir);
    const int64_t S = m->image_size();
    std::vector<std::vector<float>> inputs;
    std::vector<HfRows> hf;
    auto ref = SafetensorsFile::open(dir + "/reference.safetensors");
    for (int k = 0; ref->tensors().count("p" + std::to_string(k) + ".pixels") != 0; ++k) {
      const std::string p = "p" + std::to_string(k);
      const TensorView& t = ref->tensors().at(p + ".pixels");
      inputs.emplace_back(t.as<const float>(), t.as<const float>() + t.numel());
      const TensorView& h = ref->tensors().at(p + ".hidden");  // [N, layers + 1, P + 1, Cv]
      hf.push_back({inputs.size() - 1, h.as<const float>(), h.dim(1), nullptr});
    }
    if (inputs.empty()) {  // the 336 model: HF's pixels of the coffee image and its features
      auto pre = SafetensorsFile::open(kLlava + "/preprocess.safetensors");
      const TensorView& t = pre->tensors().at("clip336.coffee.pixels");
      inputs.emplace_back(t.as<const float>(), t.as<const float>() + t.numel());
      hf.push_back({0, nullptr, 0, ref->tensors().at("p0.vision").as<const float>()});
    }
    inputs.push_back(random_pixels(3 * 3 * S * S, 11));
    check_model(*m, dir, inputs, hf, name);
  }
}

TEST(LlavaOnevisionVisionOverLayers, MatchesHfAndItsPartsBitForBit) {
  const std::string dir = kOnevision + "/ov_tiny";
  const auto m = LlavaOnevisionModel::load(dir);
  ASSERT_TRUE(m->config().llava.vision.siglip);
  const int64_t S = m->tile_size();
  auto ref = SafetensorsFile::open(kOnevision + "/reference.safetensors");
  std::vector<std::vector<float>> inputs;
  std::vector<HfRows> hf;
  const TensorView& video = ref->tensors().at("mixed.video");  // [1, F, 3, S, S] HF's frames
  inputs.emplace_back(video.as<const float>(), video.as<const float>() + video.numel());
  const TensorView& mixed = ref->tensors().at("mixed.tower");  // [tiles then frames, P, Cv]
  const int64_t F = video.dim(1), tiles_before = mixed.dim(0) - F;
  ASSERT_GE(tiles_before, 0);
  hf.push_back({0, nullptr, 0, mixed.as<const float>() + tiles_before * mixed.dim(1) * mixed.dim(2)});
  const TensorView& tiles = ref->tensors().at("big.levels_pil");  // [1, 17, 3, S, S] u8 pixel levels
  ASSERT_EQ(tiles.dtype, DType::U8);
  std::vector<float> t(static_cast<size_t>(tiles.numel()));
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<float>(static_cast<const uint8_t*>(tiles.data)[i]) / 127.5f - 1.0f;
  inputs.push_back(std::move(t));
  ASSERT_EQ(ref->tensors().at("big.tower").dim(0), tiles.dim(1));  // the big image's tiles, HF's features
  hf.push_back({1, nullptr, 0, ref->tensors().at("big.tower").as<const float>()});
  inputs.push_back(random_pixels(5 * 3 * S * S, 12));
  check_model(m->base(), dir, inputs, hf, "ov_tiny");
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

// Image decoding and CLIP preprocessing against transformers 5.17 / Pillow 12.3 references
// (tools/fixtures/make_llava_fixtures.py -> tests/fixtures/llava).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "model/media/image_decode.h"
#include "model/media/image_preprocess.h"
#include "model/decoder/safetensors.h"

namespace vlm {
namespace {

const std::string kDir = std::string(VLM_FIXTURES_DIR) + "/llava";

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

nlohmann::json summary() {
  std::ifstream in(kDir + "/summary.json");
  return nlohmann::json::parse(in);
}

RgbImage from_view(const TensorView& t) {
  RgbImage img;
  img.height = static_cast<int>(t.dim(0));
  img.width = static_cast<int>(t.dim(1));
  const auto* p = static_cast<const uint8_t*>(t.data);
  img.pixels.assign(p, p + t.numel());
  return img;
}

RgbImage decode_file(const std::string& key) {
  const std::string file = summary()["images"][key]["file"].get<std::string>();
  return decode_image(read_bytes(kDir + "/images/" + file));
}

struct Fixtures {
  std::unique_ptr<SafetensorsFile> images = SafetensorsFile::open(kDir + "/images.safetensors");
  std::unique_ptr<SafetensorsFile> pre = SafetensorsFile::open(kDir + "/preprocess.safetensors");
};

// "<proc>.<image>.<what>" -> {proc, image}
std::pair<std::string, std::string> split_key(const std::string& k) {
  const size_t a = k.find('.'), b = k.rfind('.');
  return {k.substr(0, a), k.substr(a + 1, b - a - 1)};
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

TEST(ImageDecode, MatchesPilConvertRgbExactly) {
  Fixtures f;
  int checked = 0;
  const nlohmann::json s = summary();
  for (const auto& [key, info] : s["images"].items()) {
    const RgbImage img = decode_file(key);
    EXPECT_EQ(img.width, info["size"][0].get<int>()) << key;
    EXPECT_EQ(img.height, info["size"][1].get<int>()) << key;
    auto it = f.images->tensors().find(key + ".rgb");
    if (it == f.images->tensors().end()) continue;
    const RgbImage ref = from_view(it->second);
    ASSERT_EQ(img.pixels.size(), ref.pixels.size()) << key;
    EXPECT_TRUE(img.pixels == ref.pixels) << key << " (" << info["mode"] << ")";
    ++checked;
  }
  EXPECT_GE(checked, 8);  // RGB/L/P/RGBA PNGs and a JPEG
}

TEST(ImageDecode, BadInputsAreRequestErrors) {
  auto expect_bad = [](std::vector<uint8_t> bytes, const std::string& needle, ImageLimits limits = {}) {
    try {
      decode_image(bytes, limits);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const RequestError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_bad({}, "empty");
  expect_bad({'h', 'e', 'l', 'l', 'o'}, "unrecognized");
  expect_bad({'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'E', 'B', 'P'}, "WebP");
  std::vector<uint8_t> png = read_bytes(kDir + "/images/cat_crop.png");
  std::vector<uint8_t> jpg = read_bytes(kDir + "/images/astronaut_crop.jpg");
  expect_bad(std::vector<uint8_t>(png.begin(), png.begin() + png.size() / 2), "PNG");
  expect_bad(std::vector<uint8_t>(jpg.begin(), jpg.begin() + 200), "JPEG");
  std::vector<uint8_t> corrupt = png;
  for (size_t i = 60; i < 200; ++i) corrupt[i] ^= 0x5a;
  expect_bad(corrupt, "PNG");
  expect_bad(png, "pixels", ImageLimits{.max_bytes = 1 << 20, .max_pixels = 1000});
  expect_bad(jpg, "pixels", ImageLimits{.max_bytes = 1 << 20, .max_pixels = 1000});
  expect_bad(png, "bytes", ImageLimits{.max_bytes = 100, .max_pixels = 1 << 20});
}

TEST(ImagePreprocess, ConfigParsing) {
  const auto c = ImagePreprocessConfig::load(kDir + "/processors/clip56_pad");
  EXPECT_TRUE(c.do_pad);
  EXPECT_EQ(c.shortest_edge, 56);
  EXPECT_EQ(c.crop_h, 56);
  EXPECT_FLOAT_EQ(c.mean[0], 0.48145466f);
  EXPECT_EQ(c.output_size_for(150, 120), (std::pair<int, int>{56, 56}));
  EXPECT_FALSE(ImagePreprocessConfig::load(kDir + "/processors/clip336").do_pad);
  nlohmann::json j = {{"size", {{"shortest_edge", 10}}}, {"crop_size", {{"height", 8}, {"width", 8}}},
                      {"resample", 2}};
  EXPECT_THROW(ImagePreprocessConfig::from_json(j, "x"), LoadError);
  EXPECT_THROW(ImagePreprocessConfig::load("/nonexistent"), LoadError);
}

TEST(ImagePreprocess, ShortestEdgeSizeTruncates) {
  EXPECT_EQ(shortest_edge_size(150, 120, 56), (std::pair<int, int>{70, 56}));
  EXPECT_EQ(shortest_edge_size(83, 29, 56), (std::pair<int, int>{160, 56}));
  EXPECT_EQ(shortest_edge_size(600, 400, 336), (std::pair<int, int>{504, 336}));
  EXPECT_EQ(shortest_edge_size(37, 61, 56), (std::pair<int, int>{56, 92}));
}

// Our resize is Pillow's: bit-exact against Image.resize(BICUBIC) (the fixture keeps PIL's
// result wherever transformers' torchvision resize differs from it), and the reference agrees.
TEST(ImagePreprocess, BicubicResizeMatchesPilExactly) {
  Fixtures f;
  int checked = 0;
  for (const auto& [name, view] : f.pre->tensors()) {
    if (!ends_with(name, ".pil_resized")) continue;
    auto [proc, key] = split_key(name);
    const auto cfg = ImagePreprocessConfig::load(kDir + "/processors/" + proc);
    RgbImage src = decode_file(key);
    if (cfg.do_pad) src = pad_to_square(src, {122, 116, 104});
    const RgbImage ref = from_view(view);
    const RgbImage ours = resize_bicubic(src, ref.width, ref.height);
    EXPECT_TRUE(ours.pixels == ref.pixels) << name;
    EXPECT_TRUE(resize_bicubic_ref(src, ref.width, ref.height).pixels == ref.pixels) << name;
    ++checked;
  }
  EXPECT_GE(checked, 16);
}

// After the resize, crop + rescale + normalize are bit-exact given HF's own resized image.
TEST(ImagePreprocess, PostResizeStepsExactOnHfResizedImage) {
  Fixtures f;
  int checked = 0;
  for (const auto& [name, view] : f.pre->tensors()) {
    if (!ends_with(name, ".resized")) continue;
    auto [proc, key] = split_key(name);
    auto px = f.pre->tensors().find(proc + "." + key + ".pixels");
    if (px == f.pre->tensors().end()) continue;
    const auto cfg = ImagePreprocessConfig::load(kDir + "/processors/" + proc);
    const RgbImage cropped = center_crop(from_view(view), cfg.crop_w, cfg.crop_h);
    std::vector<float> ours(static_cast<size_t>(px->second.numel()));
    normalize_to_chw(cropped, cfg, ours.data());
    EXPECT_EQ(std::memcmp(ours.data(), px->second.data, ours.size() * 4), 0) << name;
    ++checked;
  }
  EXPECT_GE(checked, 19);
}

// The whole pipeline from file bytes: within 2/255 (in [0, 1] pixel units) of HF's pixel_values.
TEST(ImagePreprocess, FullPipelineWithinTwoLevelsOfHf) {
  Fixtures f;
  int checked = 0;
  double worst = 0;
  for (const auto& [name, view] : f.pre->tensors()) {
    if (!ends_with(name, ".pixels")) continue;
    auto [proc, key] = split_key(name);
    const auto cfg = ImagePreprocessConfig::load(kDir + "/processors/" + proc);
    const ImagePreprocessor pre(cfg);
    const RgbImage img = decode_file(key);
    const std::vector<float> ours = pre.preprocess(img);
    ASSERT_EQ(static_cast<int64_t>(ours.size()), view.numel()) << name;
    const auto [H, W] = cfg.output_size_for(img.width, img.height);
    const float* ref = view.as<const float>();
    double err = 0;
    for (int c = 0; c < 3; ++c)
      for (int64_t i = 0; i < static_cast<int64_t>(H) * W; ++i) {
        const int64_t k = c * H * W + i;
        err = std::max(err, std::abs(static_cast<double>(ours[k]) - ref[k]) * cfg.std[c]);
      }
    EXPECT_LE(err, 2.0 / 255 + 1e-6) << name;
    worst = std::max(worst, err);
    ++checked;
  }
  EXPECT_GE(checked, 19);
  EXPECT_GT(worst, 0.0);  // torchvision's resize is not PIL's: the comparison is not vacuous
}

TEST(ImagePreprocess, PadToSquareCentersTheImage) {
  RgbImage img;
  img.width = 3, img.height = 1;
  img.pixels = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const RgbImage sq = pad_to_square(img, {100, 101, 102});
  ASSERT_EQ(sq.width, 3);
  ASSERT_EQ(sq.height, 3);
  EXPECT_EQ(sq.at(0, 0)[0], 100);
  EXPECT_EQ(sq.at(1, 0)[0], 1);
  EXPECT_EQ(sq.at(1, 2)[2], 9);
  EXPECT_EQ(sq.at(2, 2)[2], 102);
}

}  // namespace
}  // namespace vlm

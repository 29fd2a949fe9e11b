// LLaVA-OneVision against transformers 5.17 (tests/fixtures/llava_onevision, made by
// tools/fixtures/make_llava_onevision_fixtures.py): AnyRes preprocessing (tile grid, pixel
// levels: equal to the PIL-backend processor's, within a few levels of the torchvision backend's),
// the SigLIP tower's features, the packed image features (unpad, bilinear shrink, newlines), the
// pooled video features, last-row logits (<= 1e-4 relative) and greedy tokens of every case.
#include <gtest/gtest.h>

#include <cstring>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "engine/scheduling/kv_cache.h"
#include "kernels/core/cpu_features.h"
#include "kernels/gemm/gemm.h"
#include "kernels/ops/vision_ops.h"
#include "model/decoder/forward_batch.h"
#include "model/decoder/safetensors.h"
#include "model/families/architecture.h"
#include "model/families/llava_onevision.h"
#include "model/media/onevision_preprocess.h"
#include "tests/support/decoder_harness.h"
#include "tests/support/onevision_fixture.h"

namespace vlm {
namespace {

using testing::read_whole_file;
const std::string kRoot = testing::onevision_fixture_root();
const std::string kModel = kRoot + "/ov_tiny";

RgbImage load_png_from(const std::string& root, const std::string& name) {
  const std::string b = read_whole_file(root + "/media/" + name);
  return decode_image({reinterpret_cast<const uint8_t*>(b.data()), b.size()});
}
RgbImage load_png(const std::string& name) { return load_png_from(kRoot, name); }

// The model, its processor configs, the references and the recorded cases (loaded once per
// fixture: ROOT/MODEL under tests/fixtures; ov_tiny by default).
struct Fixture {
  explicit Fixture(const std::string& root = kRoot, const std::string& model_dir = "ov_tiny")
      : root(root),
        dir(root + "/" + model_dir),
        model(LlavaOnevisionModel::load(dir)),
        image(OnevisionPreprocessConfig::load(dir, false)),
        video(OnevisionPreprocessConfig::load(dir, true)),
        ref(SafetensorsFile::open(root + "/reference.safetensors")),
        cases(nlohmann::json::parse(read_whole_file(dir + "/cases.json"))) {}
  std::string root, dir;
  std::unique_ptr<LlavaOnevisionModel> model;
  OnevisionPreprocessConfig image, video;
  std::unique_ptr<SafetensorsFile> ref;
  nlohmann::json cases;

  const TensorView& t(const std::string& name) const { return ref->tensors().at(name); }
  bool has(const std::string& name) const { return ref->tensors().count(name) > 0; }
  int64_t tile_floats() const { return 3 * int64_t{image.size} * image.size; }  // one tile's [3, S, S]
  int64_t tile_patches() const {  // (S / p)^2: a remainder of the tile beyond the patches is dropped
    const int64_t g = image.size / model->config().llava.vision.patch_size;
    return g * g;
  }
  RgbImage png(const std::string& name) const { return load_png_from(root, name); }

  // The case's media in prompt order (the template renders a message's images, then its videos).
  std::vector<MediaPixels> media(const nlohmann::json& c) const {
    std::vector<MediaPixels> images, videos;
    for (const auto& m : c["messages"])
      for (const auto& p : m["content"]) {
        if (p["type"] == "image") images.push_back(preprocess_onevision_image(png(p["media"][0]), image));
        if (p["type"] == "video") {
          std::vector<RgbImage> frames;
          for (const auto& f : p["media"]) frames.push_back(png(f));
          videos.push_back(preprocess_onevision_video(frames, video));
        }
      }
    images.insert(images.end(), videos.begin(), videos.end());
    return images;
  }
};

const Fixture& fixture() {
  static const Fixture f;
  return f;
}

// The HF-matching tests run on both recorded models: ov_tiny (40-px tiles, text head size 4) and
// ov_gpu (tools/fixtures/make_llava_onevision_fixtures.py --variant gpu: 44-px tiles over 8-px
// patches, so the patch embedding drops a 4-px remainder; text and SigLIP head size 8).
const Fixture& fixture(const std::string& which) {
  if (which == "ov_tiny") return fixture();
  static const Fixture gpu(testing::onevision_fixture_root() + "_gpu", "ov_gpu");
  return gpu;
}

class OnevisionHf : public ::testing::TestWithParam<std::string> {};

std::vector<int> levels(const float* p, size_t n) {  // mean = std = 0.5: level = (p + 1) * 127.5
  std::vector<int> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<int>(std::lround((p[i] + 1.0f) * 127.5f));
  return out;
}

double rel_err(const float* ours, const float* ref, int64_t rows, int64_t n) {
  return testing::max_row_rel_error(ours, ref, rows, n);
}

TEST(LlavaOnevisionConfig, ReadsTheCheckpoint) {
  const Fixture& f = fixture();
  EXPECT_EQ(detect_architecture(kModel), ModelArchitecture::LlavaOnevision);
  const LlavaOnevisionConfig& c = f.model->config();
  EXPECT_TRUE(c.llava.vision.siglip);
  EXPECT_EQ(c.llava.vision.act, VisionActivation::GeluTanh);
  EXPECT_FALSE(c.llava.drop_cls);
  EXPECT_EQ(c.llava.feature_layers, std::vector<int>{2});
  EXPECT_EQ(c.llava.image_token_id, 151655);
  EXPECT_EQ(c.video_token_id, 151656);
  EXPECT_EQ(c.max_num_patches, 9);
  EXPECT_EQ(c.grid_pinpoints.size(), 9u);
  EXPECT_EQ(f.image.size, 40);
  EXPECT_EQ(f.image.grid_pinpoints, c.grid_pinpoints);
  EXPECT_TRUE(f.video.grid_pinpoints.empty());
}

TEST_P(OnevisionHf, TilesAndLevelsMatchHf) {
  const Fixture& f = fixture(GetParam());
  const int64_t tile = f.tile_floats();
  for (const char* name : {"wide", "tall", "big", "small", "square", "odd"}) {
    const nlohmann::json* c = nullptr;
    for (const auto& x : f.cases)
      if (x["name"] == name) c = &x;
    ASSERT_NE(c, nullptr) << name;
    const MediaPixels m = f.media(*c)[0];
    const TensorView& pil = f.t(std::string(name) + ".levels_pil");
    const TensorView& tv = f.t(std::string(name) + ".levels_tv");
    ASSERT_EQ(pil.dtype, DType::U8);
    ASSERT_EQ(static_cast<int64_t>(m.data.size()), pil.dim(1) * tile) << name << ": tile count";
    EXPECT_EQ((*c)["image_sizes"][0], (std::vector<int>{m.height, m.width})) << name;
    const std::vector<int> ours = levels(m.data.data(), m.data.size());
    int max_pil = 0, max_tv = 0;
    for (size_t i = 0; i < ours.size(); ++i) {
      max_pil = std::max(max_pil, std::abs(ours[i] - static_cast<const uint8_t*>(pil.data)[i]));
      max_tv = std::max(max_tv, std::abs(ours[i] - static_cast<const uint8_t*>(tv.data)[i]));
    }
    EXPECT_LE(max_pil, 1) << name << " vs the PIL-backend processor";  // the Done-when bound
    EXPECT_EQ(max_pil, 0) << name << " (PIL's bicubic is reproduced bit for bit)";
    EXPECT_LE(max_tv, 3) << name << " vs the torchvision backend";
    std::printf("  %-6s %2zu tiles: max level difference %d vs PIL backend, %d vs torchvision backend\n", name,
                m.data.size() / static_cast<size_t>(tile), max_pil, max_tv);
  }
  // The normalisation arithmetic, value for value.
  const MediaPixels wide = preprocess_onevision_image(f.png("wide.png"), f.image);
  const TensorView& px = f.t("wide.pixels");
  ASSERT_EQ(static_cast<int64_t>(wide.data.size()), px.numel());
  EXPECT_LE(rel_err(wide.data.data(), px.as<const float>(), 1, px.numel()), 1e-6);
}

TEST_P(OnevisionHf, TowerAndPackedFeaturesMatchHf) {
  const Fixture& f = fixture(GetParam());
  const int64_t C = f.model->config().llava.text.hidden_size, Cv = f.model->config().llava.vision.hidden_size;
  for (const auto& c : f.cases) {
    const std::string name = c["name"];
    const std::vector<MediaPixels> items = f.media(c);
    // Tower: every item's tiles / frames in order, as HF ran them (images first, then videos).
    std::vector<float> tower;
    std::vector<float> image_feats, video_feats;
    for (size_t k = 0; k < items.size(); ++k) {
      const MediaPixels& m = items[k];
      if (m.modality == Modality::Video) {
        const TensorView& px = f.t(name + ".video");
        EXPECT_LE(rel_err(m.data.data(), px.as<const float>(), 1, px.numel()), 1e-6) << name << ": frames";
      }
      const int64_t N = static_cast<int64_t>(m.data.size()) / f.tile_floats();
      std::vector<float> feats(static_cast<size_t>(N * f.tile_patches() * Cv));
      f.model->vision_features(m.data.data(), N, feats.data());
      tower.insert(tower.end(), feats.begin(), feats.end());
      std::vector<float> e(static_cast<size_t>(f.model->media_tokens(m, static_cast<int>(k)) * C));
      f.model->encode_item(m, e.data());
      auto& dst = m.modality == Modality::Video ? video_feats : image_feats;
      dst.insert(dst.end(), e.begin(), e.end());
    }
    const TensorView& rt = f.t(name + ".tower");
    ASSERT_EQ(static_cast<int64_t>(tower.size()), rt.numel()) << name;
    const double e_tower = rel_err(tower.data(), rt.as<const float>(), rt.numel() / Cv, Cv);
    EXPECT_LE(e_tower, 1e-4) << name << ": tower";
    std::printf("  %-10s tower %.2e", name.c_str(), e_tower);
    for (auto [key, ours] : {std::pair{".image_feats", &image_feats}, std::pair{".video_feats", &video_feats}}) {
      if (!f.has(name + key)) {
        EXPECT_TRUE(ours->empty()) << name << key;
        continue;
      }
      const TensorView& r = f.t(name + key);
      ASSERT_EQ(static_cast<int64_t>(ours->size()), r.numel()) << name << key;
      const double e = rel_err(ours->data(), r.as<const float>(), r.numel() / C, C);
      EXPECT_LE(e, 1e-4) << name << key;
      std::printf("  %s %.2e (%lld rows)", key + 1, e, static_cast<long long>(r.numel() / C));
    }
    std::printf("\n");
  }
}

// The wiring (model/arch/onevision_wiring.h) item by item against HF: each image's and video's
// rows against its own slice of HF's packed features (<= 1e-4 with f32 activations; bf16 ones within
// 3e-2), and its parts bit for bit: an image's first g*g rows are its base tile's projector rows,
// a newline row (the checkpoint's image_newline) ends every row of the unpadded (or shrunk) grid,
// a video's rows are its frames' pooled rows and one newline. Replaces the bit-for-bit check
// against the encode_item loop the wiring replaced (tests/support/onevision_item_loop, deleted in
// step 8 of docs/WRITTEN_ONCE.md).
TEST_P(OnevisionHf, WiringItemByItemMatchesHfAndKeepsItsParts) {
  const Fixture& f = fixture(GetParam());
  const LlavaOnevisionModel& model = *f.model;
  const int64_t C = model.config().llava.text.hidden_size, g = model.grid(), per_tile = g * g;
  const WeightStore& w = model.base().weights();
  const TensorView nl = w.get(w.has("model.image_newline") ? "model.image_newline" : "image_newline", {C});
  std::vector<float> newline(static_cast<size_t>(C));
  convert_to_f32(nl.data, nl.dtype, newline.data(), C);
  auto same_row = [&](const float* row, const float* want) { return std::memcmp(row, want, C * sizeof(float)) == 0; };
  int images = 0, videos = 0, shrunk = 0;
  for (const auto& c : f.cases) {
    const std::string name = c["name"];
    const std::vector<MediaPixels> items = f.media(c);
    int64_t at_image = 0, at_video = 0;  // rows into HF's packed image / video features
    for (size_t k = 0; k < items.size(); ++k) {
      const MediaPixels& m = items[k];
      const bool video = m.modality == Modality::Video;
      const std::string what = name + " item " + std::to_string(k);
      const int64_t n = model.media_tokens(m, static_cast<int>(k));
      std::vector<float> e(static_cast<size_t>(n * C)), b(e.size());
      model.encode_item(m, e.data());
      const std::string key = name + (video ? ".video_feats" : ".image_feats");
      ASSERT_TRUE(f.has(key)) << what;
      int64_t& at = video ? at_video : at_image;
      const TensorView& r = f.t(key);
      ASSERT_LE((at + n) * C, r.numel()) << what;
      const float* want = r.as<const float>() + at * C;
      at += n;
      EXPECT_LE(rel_err(e.data(), want, n, C), 1e-4) << what;
      if (cpu_has_avx512_bf16()) {
        set_bf16_activations(true);
        model.encode_item(m, b.data());
        set_bf16_activations(false);
        EXPECT_LE(rel_err(b.data(), want, n, C), 3e-2) << what << " (bf16 activations)";
      }
      // The parts, from the projector's rows of the item's tiles / frames.
      const int64_t N = static_cast<int64_t>(m.data.size()) / f.tile_floats();
      std::vector<float> tiles(static_cast<size_t>(N * per_tile * C));
      model.base().encode_images(m.data.data(), N, tiles.data());
      ASSERT_TRUE(same_row(e.data() + (n - 1) * C, newline.data())) << what << ": last row not the newline";
      if (video) {
        const int64_t q = (g + 1) / 2;
        ASSERT_EQ(n, N * q * q + 1) << what;
        std::vector<float> pooled(static_cast<size_t>(q * q * C));
        for (int64_t t = 0; t < N; ++t) {
          bilinear_resize(tiles.data() + t * per_tile * C, g, g, C, q, q, pooled.data());
          EXPECT_EQ(0, std::memcmp(e.data() + t * q * q * C, pooled.data(), pooled.size() * sizeof(float)))
              << what << ": frame " << t;
        }
        ++videos;
        continue;
      }
      const AnyresLayout a = model.image_layout({m.height, m.width});
      ASSERT_EQ(n, per_tile + a.out_h * (a.out_w + 1)) << what;
      EXPECT_EQ(0, std::memcmp(e.data(), tiles.data(), per_tile * C * sizeof(float))) << what << ": base tile";
      for (int64_t y = 0; y < a.out_h; ++y)
        EXPECT_TRUE(same_row(e.data() + (per_tile + y * (a.out_w + 1) + a.out_w) * C, newline.data()))
            << what << ": grid row " << y << " does not end in the newline";
      ++images;
      shrunk += a.shrinks() ? 1 : 0;
    }
    for (auto [key, at] : {std::pair{".image_feats", at_image}, std::pair{".video_feats", at_video}}) {
      if (f.has(name + key)) {
        EXPECT_EQ(at * C, f.t(name + key).numel()) << name << key << ": rows left over";
      }
    }
  }
  EXPECT_GT(images, 0);
  EXPECT_GT(videos, 0);
  std::printf("  %d images (%d shrunk), %d videos\n", images, shrunk, videos);
}

// Prefill of the case's prompt in chunks (edges inside media runs), then greedy decoding.
TEST_P(OnevisionHf, LogitsAndGreedyMatchHf) {
  const Fixture& f = fixture(GetParam());
  const LlmDecoder& dec = f.model->decoder();
  const ModelConfig& tc = dec.config();
  const int64_t C = tc.hidden_size, V = tc.vocab_size;
  for (const auto& c : f.cases) {
    const std::string name = c["name"];
    const std::vector<int32_t> ids = c["input_ids"];
    const std::vector<MediaPixels> items = f.media(c);
    std::vector<MediaTokens> mt;
    std::vector<std::vector<float>> embeds;
    for (size_t k = 0; k < items.size(); ++k) {
      const int64_t n = f.model->media_tokens(items[k], static_cast<int>(k));
      mt.push_back({items[k].modality, n, f.model->tokens_per_frame(items[k])});
      embeds.emplace_back(static_cast<size_t>(n * C));
      f.model->encode_item(items[k], embeds.back().data());
    }
    const MultimodalPrompt prompt = expand_media_tokens(ids, f.model->image_token_id(), f.model->video_token_id(), mt);
    ASSERT_EQ(prompt.token_ids, ids) << name;
    std::vector<const float*> media;
    for (const auto& e : embeds) media.push_back(e.data());

    const std::vector<int32_t> greedy = c["greedy_recompute_ids"];
    constexpr int kBlock = 16;
    const int64_t total = prompt.size() + static_cast<int64_t>(greedy.size());
    KVCacheShape shape{tc.num_layers, (total + kBlock - 1) / kBlock + 1, kBlock, static_cast<int>(tc.num_kv_heads),
                       static_cast<int>(tc.head_dim), DType::F32};
    KVCache cache(shape);
    std::vector<int32_t> blocks(static_cast<size_t>(shape.num_blocks));
    std::iota(blocks.rbegin(), blocks.rend(), 0);
    std::vector<int32_t> seq = prompt.token_ids;
    std::vector<float> logits;
    const int64_t chunk = 37;
    for (int64_t pos = 0; pos < prompt.size(); pos += chunk) {
      const int64_t len = std::min<int64_t>(chunk, prompt.size() - pos);
      SequenceChunk sc{std::span<const int32_t>(seq.data() + pos, len), static_cast<int32_t>(pos), blocks,
                       LogitsFor::Last};
      ForwardBatch batch = make_forward_batch(std::span(&sc, 1), kBlock);
      std::vector<float> e(static_cast<size_t>(len * C));
      std::vector<uint8_t> use(static_cast<size_t>(len));
      gather_media_embeddings(prompt, pos, len, media, C, e.data(), use.data());
      dec.forward(batch, cache.layers(), logits, EmbeddingOverride{e.data(), use.data()});
    }
    const TensorView& lid = f.t(name + ".logit_ids");
    std::vector<float> sel;
    for (int64_t i = 0; i < lid.numel(); ++i) sel.push_back(logits[static_cast<size_t>(lid.as<const int32_t>()[i])]);
    const double e_logits = rel_err(sel.data(), f.t(name + ".logits").as<const float>(), 1, lid.numel());
    EXPECT_LE(e_logits, 1e-4) << name;
    std::vector<int32_t> ours;
    for (size_t i = 0; i < greedy.size(); ++i) {
      const int32_t tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + V) - logits.begin());
      ours.push_back(tok);
      seq.push_back(tok);
      SequenceChunk sc{std::span<const int32_t>(seq.data() + seq.size() - 1, 1), static_cast<int32_t>(seq.size() - 1),
                       blocks, LogitsFor::Last};
      ForwardBatch batch = make_forward_batch(std::span(&sc, 1), kBlock);
      dec.forward(batch, cache.layers(), logits);
    }
    EXPECT_EQ(ours, greedy) << name << " (HF min margin " << c["min_margin"] << ")";
    std::printf("  %-10s %3lld tokens: last-row logits %.2e (%lld vocab ids), greedy %s\n", name.c_str(),
                static_cast<long long>(prompt.size()), e_logits, static_cast<long long>(lid.numel()),
                ours == greedy ? "equal" : "DIFFERENT");
    EXPECT_EQ(ours, c["generated_ids"].get<std::vector<int32_t>>()) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OnevisionHf, ::testing::Values("ov_tiny", "ov_gpu"));

TEST(OnevisionPreprocess, ReadsBothProcessorLayouts) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ov_layouts_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const nlohmann::json combined = nlohmann::json::parse(read_whole_file(kModel + "/processor_config.json"));
  // transformers 5: only processor_config.json, the sections nested.
  std::ofstream(dir / "processor_config.json") << combined.dump();
  EXPECT_EQ(OnevisionPreprocessConfig::load(dir.string(), false).grid_pinpoints.size(), 9u);
  EXPECT_EQ(OnevisionPreprocessConfig::load(dir.string(), true).size, 40);
  // The separate file wins when both exist.
  nlohmann::json separate = combined["image_processor"];
  separate["size"] = {{"height", 80}, {"width", 80}};
  separate["image_grid_pinpoints"] = {{80, 80}, {80, 160}};
  std::ofstream(dir / "preprocessor_config.json") << separate.dump();
  const OnevisionPreprocessConfig c = OnevisionPreprocessConfig::load(dir.string(), false);
  EXPECT_EQ(c.size, 80);
  EXPECT_EQ(c.grid_pinpoints.size(), 2u);
  EXPECT_EQ(OnevisionPreprocessConfig::load(dir.string(), true).size, 40);  // no separate video file
  fs::remove(dir / "processor_config.json");
  EXPECT_THROW(OnevisionPreprocessConfig::load(dir.string(), true), LoadError);
  fs::remove_all(dir);
}

TEST(Anyres, LayoutsOfTheFixtureImages) {
  const std::vector<Resolution> pins = fixture().model->config().grid_pinpoints;
  // (h, w) -> tiles, unpadded rows x cols, output rows x cols; HF's processor counts these tokens.
  struct E { Resolution img; int rows, cols, uh, uw, oh, ow; int64_t tokens; };
  for (const E& e : {E{{36, 100}, 1, 3, 5, 13, 5, 13, 95}, E{{150, 170}, 4, 4, 18, 20, 14, 15, 249},
                     E{{40, 40}, 1, 1, 5, 5, 5, 5, 55}, E{{20, 24}, 1, 1, 5, 5, 5, 5, 55}}) {
    const AnyresLayout a = anyres_layout(e.img, pins, 40, 5, 9);
    EXPECT_EQ(a.tile_rows, e.rows) << e.img.height << "x" << e.img.width;
    EXPECT_EQ(a.tile_cols, e.cols);
    EXPECT_EQ(a.unpad_h, e.uh);
    EXPECT_EQ(a.unpad_w, e.uw);
    EXPECT_EQ(a.out_h, e.oh);
    EXPECT_EQ(a.out_w, e.ow);
    EXPECT_EQ(a.num_tokens(), e.tokens);
  }
  EXPECT_EQ(pooled_frame_tokens(5), 9);
  EXPECT_EQ(pooled_frame_tokens(27), 196);  // LLaVA-OneVision-7B: 384 / 14 = 27 -> 14 x 14
}

TEST(LlavaOnevision, RefusesItemsThatDoNotFit) {
  const LlavaOnevisionModel& m = *fixture().model;
  MediaPixels bad;
  bad.modality = Modality::Image;
  bad.height = 36, bad.width = 100;
  bad.data.assign(3 * 40 * 40 * 2, 0.0f);  // 2 tiles; the 1x3 grid needs 4
  EXPECT_THROW(m.media_tokens(bad, 0), RequestError);
  bad.data.resize(100);
  EXPECT_THROW(m.media_tokens(bad, 0), RequestError);
}

}  // namespace
}  // namespace vlm

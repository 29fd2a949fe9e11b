// Qwen3VLModel against transformers 5.17 (tests/fixtures/qwen3vl, made by
// tools/fixtures/make_qwen3_vl_fixtures.py): the processor's pixels and grids (within 2 levels
// where resampled, exact otherwise), the timestamps it renders, M-RoPE positions exact vs the
// positions the decoder got, the tower's planes side by side, and logits <= 1e-4 relative with
// greedy tokens exact on HF's pixel_values for all five cases (text, one image, two images, a
// video, mixed), whole and in 7-token chunks that cut media runs (the DeepStack planes ride with
// the override rows).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>

#include <unistd.h>

#include "engine/scheduling/kv_cache.h"
#include "kernels/core/check.h"
#include "model/decoder/forward_batch.h"
#include "model/families/qwen3_vl.h"
#include "model/media/qwen2vl_preprocess.h"
#include "model/media/qwen3vl_video.h"
#include "model/media/video_decode.h"
#include "tests/support/decoder_harness.h"
#include "tests/support/qwen3vl_fixture.h"

namespace vlm {
namespace {

using Grid = std::array<int32_t, 3>;
using testing::qwen3vl_fixture_dir;

#define SKIP_WITHOUT_FIXTURE()                                                                             \
  if (!testing::qwen3vl_fixture_present())                                                               \
  GTEST_SKIP() << "fixture tests/fixtures/qwen3vl not generated (tools/fixtures/make_qwen3_vl_fixtures.py)"

// Media stored as U8 [H, W, 3] (images) or [T, H, W, 3] (videos).
std::vector<RgbImage> frames(const SafetensorsFile& media, const std::string& name) {
  const TensorView& t = media.tensors().at(name);
  const bool video = t.shape.ndim == 4;
  const int64_t T = video ? t.dim(0) : 1, H = t.dim(video ? 1 : 0), W = t.dim(video ? 2 : 1);
  std::vector<RgbImage> out;
  const auto* p = static_cast<const uint8_t*>(t.data);
  for (int64_t i = 0; i < T; ++i) {
    RgbImage im;
    im.width = static_cast<int>(W);
    im.height = static_cast<int>(H);
    im.pixels.assign(p + i * H * W * 3, p + (i + 1) * H * W * 3);
    out.push_back(std::move(im));
  }
  return out;
}

// Max difference in 8-bit levels (values are (x / 255 - mean) / std).
double worst_levels(const std::vector<float>& got, const std::vector<float>& want, const Qwen2VLPreprocessConfig& cfg) {
  double worst = 0;
  const size_t K = static_cast<size_t>(cfg.patch_dim());
  for (size_t i = 0; i < got.size(); ++i) {
    const size_t c = (i % K) / (K / 3);
    worst = std::max(worst, std::abs(double(got[i]) - want[i]) * cfg.std[c] * 255.0);
  }
  return worst;
}

TEST(Qwen3VLProcessor, ImagePixelsAndGridsMatchHf) {
  SKIP_WITHOUT_FIXTURE();
  const auto media = SafetensorsFile::open(qwen3vl_fixture_dir() + "/media.safetensors");
  const auto ref = testing::qwen3vl_reference();
  const Qwen2VLPreprocessConfig cfg = Qwen2VLPreprocessConfig::load(qwen3vl_fixture_dir() + "/processor", false);
  EXPECT_EQ(cfg.patch_size, 16);
  EXPECT_EQ(cfg.min_pixels, 4096);
  EXPECT_EQ(cfg.max_pixels, 30720);
  int checked = 0;
  for (const auto& c : testing::qwen3vl_cases()) {
    if (c.images.empty()) continue;
    const std::string p = "p" + std::to_string(c.k);
    std::vector<float> got;
    std::vector<Grid> grids;
    bool resized = false;
    for (const std::string& n : c.images) {
      const auto f = frames(*media, "img." + n);
      const VisionPatches vp = qwen2vl_preprocess(f, cfg);
      got.insert(got.end(), vp.pixels.begin(), vp.pixels.end());
      grids.push_back(vp.grid_thw);
      resized = resized || vp.grid_thw[1] * 16 != f[0].height || vp.grid_thw[2] * 16 != f[0].width;
    }
    EXPECT_EQ(grids, ref.grids(p + ".image_grid")) << p;
    const auto want = ref.floats(p + ".image_pixels");
    ASSERT_EQ(got.size(), want.size()) << p;
    const double worst = worst_levels(got, want, cfg);
    if (resized) EXPECT_LE(worst, 2.0 + 1e-3) << p;
    else EXPECT_EQ(got, want) << p;
    std::printf("%s images: max diff %.3f levels%s\n", p.c_str(), worst, resized ? " (resampled)" : "");
    ++checked;
  }
  EXPECT_EQ(checked, 3);
}

TEST(Qwen3VLProcessor, VideoPixelsGridsAndTimestampsMatchHf) {
  SKIP_WITHOUT_FIXTURE();
  const auto media = SafetensorsFile::open(qwen3vl_fixture_dir() + "/media.safetensors");
  const auto ref = testing::qwen3vl_reference();
  const Qwen3VLVideoConfig cfg = Qwen3VLVideoConfig::load(qwen3vl_fixture_dir() + "/processor");
  EXPECT_EQ(cfg.base.patch_size, 16);
  EXPECT_EQ(cfg.base.min_pixels, 4096);
  EXPECT_EQ(cfg.base.max_pixels, 49152);
  EXPECT_FALSE(cfg.cap_pixels_per_frame);
  int checked = 0;
  for (const auto& c : testing::qwen3vl_cases()) {
    if (c.videos.empty()) continue;
    const std::string p = "p" + std::to_string(c.k);
    ASSERT_EQ(c.videos.size(), 1u);
    const auto f = frames(*media, "vid." + c.videos[0]);
    const VisionPatches vp = qwen3vl_preprocess_video(f, cfg);
    EXPECT_EQ(std::vector<Grid>{vp.grid_thw}, ref.grids(p + ".video_grid")) << p;
    const auto want = ref.floats(p + ".video_pixels");
    ASSERT_EQ(vp.pixels.size(), want.size()) << p;
    const bool resized = vp.grid_thw[1] * 16 != f[0].height || vp.grid_thw[2] * 16 != f[0].width;
    const double worst = worst_levels(vp.pixels, want, cfg.base);
    if (resized) EXPECT_LE(worst, 2.0 + 1e-3) << p;
    else EXPECT_EQ(vp.pixels, want) << p;
    std::printf("%s video: grid %dx%dx%d, max diff %.3f levels%s\n", p.c_str(), vp.grid_thw[0], vp.grid_thw[1],
                vp.grid_thw[2], worst, resized ? " (resampled)" : "");
    // The timestamps the processor rendered, group after group, each before its frame's tokens.
    std::vector<double> secs;
    for (int i : c.frames_indices[0]) secs.push_back(i / c.fps[0]);
    const auto ts = qwen3vl_group_timestamps(secs, 2);
    ASSERT_EQ(static_cast<int32_t>(ts.size()), vp.grid_thw[0]) << p;
    size_t at = 0;
    for (double t : ts) {
      const std::string want_text = qwen3vl_timestamp_text(t) + "<|vision_start|><|video_pad|>";
      const size_t found = c.rendered.find(want_text, at);
      EXPECT_NE(found, std::string::npos) << p << ": " << want_text << " in " << c.rendered;
      if (found != std::string::npos) at = found + 1;
    }
    ++checked;
  }
  EXPECT_GE(checked, 3);  // p3, p4 (frames at an fps) and p5 (a video file's sampled frames)
  // printf's rounding is Python's: ties to even on the double's value.
  EXPECT_EQ(qwen3vl_timestamp_text(0.25), "<0.2 seconds>");
  EXPECT_EQ(qwen3vl_timestamp_text(1.25), "<1.2 seconds>");
  EXPECT_EQ(qwen3vl_timestamp_text(2.0), "<2.0 seconds>");
  EXPECT_EQ(qwen3vl_group_timestamps(std::vector<double>{0, 1, 2}, 2), (std::vector<double>{0.5, 2.0}));
}

// A video's temporal groups as the engine takes them: grid (1, h, w) items in order, each with its
// rows, its timestamp and its group index (video_group: the engine's one-video grouping).
TEST(Qwen3VLProcessor, SplitVideoNumbersItsGroups) {
  MediaPixels v;
  v.modality = Modality::Video;
  v.grid_thw = {3, 2, 2};
  v.num_frames = 5;
  v.group_seconds = {0.5, 1.5, 2.25};
  for (int i = 0; i < 3 * 4 * 2; ++i) v.data.push_back(static_cast<float>(i));  // 12 patches of 2 values
  const std::vector<MediaPixels> g = qwen3vl_split_video(v, 2);
  ASSERT_EQ(g.size(), 3u);
  for (int t = 0; t < 3; ++t) {
    EXPECT_EQ(g[t].video_group, t);
    EXPECT_EQ(g[t].modality, Modality::Video);
    EXPECT_EQ(g[t].grid_thw, (std::array<int32_t, 3>{1, 2, 2}));
    EXPECT_EQ(g[t].group_seconds, std::vector<double>{v.group_seconds[t]});
    EXPECT_EQ(g[t].data.front(), static_cast<float>(8 * t));
    EXPECT_EQ(g[t].data.size(), 8u);
  }
  EXPECT_EQ(g[2].num_frames, 1);  // the last group holds the fifth frame only
  EXPECT_EQ(v.video_group, -1);   // a whole video is not a group
}

TEST(Qwen3VLProcessor, VideoResizeFollowsQwen3Rules) {
  Qwen3VLVideoConfig cfg;
  cfg.base.patch_size = 16;
  cfg.base.min_pixels = 4096;
  cfg.base.max_pixels = 49152;
  // 3 frames of 50 x 70: t_bar = round(1.5) * 2 = 4; 4 * 64 * 64 = 16384 within the budget.
  EXPECT_EQ(qwen3vl_video_size(3, 50, 70, cfg), std::make_pair(64, 64));
  // 8 frames of 240 x 320: 8 * 256 * 320 > 49152 -> beta = sqrt(8 * 240 * 320 / 49152), floors.
  EXPECT_EQ(qwen3vl_video_size(8, 240, 320, cfg), std::make_pair(64, 64));
  EXPECT_EQ(qwen3vl_video_size(4, 100, 130, cfg), std::make_pair(96, 128));  // round(3.125), round(4.0625)
  EXPECT_EQ(qwen3vl_video_size(2, 20, 300, cfg), std::make_pair(32, 480));   // a side under 32 scaled up first
  EXPECT_THROW(qwen3vl_video_size(1, 64, 64, cfg), RequestError);  // fewer frames than temporal_patch_size
  // Per-frame cap: max(min(4 * 32^2, 49152 / 8), int(4096 * 1.05)) = 4300 per frame.
  cfg.cap_pixels_per_frame = true;
  cfg.max_video_tokens = 4;
  EXPECT_EQ(qwen3vl_video_size(8, 240, 320, cfg), std::make_pair(32, 64));  // (transformers 5.17 smart_resize gives the same)
}

// Qwen3VLVideoProcessor.sample_frames (transformers 5.17), values from its formula.
TEST(Qwen3VLProcessor, SampleIndicesFollowTheProcessor) {
  // rgb.mp4: 20 frames at 10 fps, fps 2 -> int(4.0) = 4 frames: linspace(0, 19, 4) = 0, 6.33, 12.67, 19.
  EXPECT_EQ(qwen3vl_sample_indices(20, 10.0, 2.0, 4, 768), (std::vector<int64_t>{0, 6, 13, 19}));
  // 300 frames at 30 fps, fps 2 -> 20 frames, step 299 / 19 = 15.74 (round half to even at .5).
  const auto a = qwen3vl_sample_indices(300, 30.0, 2.0, 4, 768);
  ASSERT_EQ(a.size(), 20u);
  EXPECT_EQ(a[1], 16);
  EXPECT_EQ(a[19], 299);
  EXPECT_EQ(qwen3vl_sample_indices(3, 10.0, 2.0, 4, 768), (std::vector<int64_t>{0, 1, 2}));  // at most all frames
  EXPECT_EQ(qwen3vl_sample_indices(90, 30.0, 2.0, 4, 5).size(), 5u);                       // max_frames
  EXPECT_EQ(qwen3vl_sample_indices(5, 1.0, 0.5, 1, 768), (std::vector<int64_t>{0, 4}));     // int(2.5) = 2
  EXPECT_THROW(qwen3vl_sample_indices(0, 10.0, 2.0, 4, 768), RequestError);
  EXPECT_THROW(qwen3vl_sample_indices(10, 10.0, 0.0, 4, 768), RequestError);
}

// The video-file case (case 5 of a fixture run with it; skipped before): rgb.mp4 (lossless RGB)
// decoded by FFmpeg at the indices Qwen3VLVideoProcessor.sample_frames picks gives the reader's
// frames exactly, the processor's rows (resampled: within 2 levels) and grid, and the timestamps
// over the file's fps.
TEST(Qwen3VLProcessor, VideoFileDecodesAndSamplesAsHf) {
  SKIP_WITHOUT_FIXTURE();
  const auto cases = testing::qwen3vl_cases();
  if (cases.size() < 6) GTEST_SKIP() << "the fixture has no video-file case yet (rerun make_qwen3_vl_fixtures.py)";
  const auto& c = cases[5];
  ASSERT_EQ(c.videos.size(), 1u);
  std::ifstream f(std::string(VLM_FIXTURES_DIR) + "/video/" + c.videos[0], std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const Qwen3VLVideoConfig cfg = Qwen3VLVideoConfig::load(qwen3vl_fixture_dir() + "/processor");
  double video_fps = 0;
  const DecodedVideo v = decode_video(bytes, VideoLimits{}, [&](const VideoInfo& info) {
    video_fps = info.fps;
    return qwen3vl_sample_indices(info.num_frames, info.fps, cfg.fps, cfg.min_frames, cfg.max_frames);
  });
  std::vector<int> idx(v.indices.begin(), v.indices.end());
  EXPECT_EQ(idx, c.frames_indices[0]);
  EXPECT_DOUBLE_EQ(video_fps, c.fps[0]);
  const auto media = SafetensorsFile::open(qwen3vl_fixture_dir() + "/media.safetensors");
  const auto want_frames = frames(*media, "vid." + c.videos[0]);
  ASSERT_EQ(v.frames.size(), want_frames.size());
  for (size_t i = 0; i < v.frames.size(); ++i) EXPECT_EQ(v.frames[i].pixels, want_frames[i].pixels) << "frame " << i;
  const auto ref = testing::qwen3vl_reference();
  const VisionPatches vp = qwen3vl_preprocess_video(v.frames, cfg);
  EXPECT_EQ(std::vector<Grid>{vp.grid_thw}, ref.grids("p5.video_grid"));
  const auto want = ref.floats("p5.video_pixels");
  ASSERT_EQ(vp.pixels.size(), want.size());
  EXPECT_LE(worst_levels(vp.pixels, want, cfg.base), 2.0 + 1e-3);
  std::vector<double> secs;
  for (int64_t i : v.indices) secs.push_back(static_cast<double>(i) / video_fps);
  for (double t : qwen3vl_group_timestamps(secs, 2))
    EXPECT_NE(c.rendered.find(qwen3vl_timestamp_text(t) + "<|vision_start|>"), std::string::npos) << t;
}

struct Model {
  explicit Model(const std::string& dir = testing::qwen3vl_model_dir()) : model(Qwen3VLModel::load(dir)) {}
  std::unique_ptr<Qwen3VLModel> model;
  testing::Qwen3VLReference ref = testing::qwen3vl_reference();
};

int num_cases(const testing::Qwen3VLReference& ref) {
  int n = 0;
  while (ref.has("p" + std::to_string(n) + ".ids")) ++n;
  return n;
}

TEST(Qwen3VLFixture, RopePositionsMatchTheDecodersPositions) {
  SKIP_WITHOUT_FIXTURE();
  Model m;
  ASSERT_GE(num_cases(m.ref), 5);
  for (int k = 0; k < num_cases(m.ref); ++k) {
    const std::string p = "p" + std::to_string(k);
    const auto ids = m.ref.ints(p + ".ids");
    const MropePositions pos = m.model->positions(ids, m.ref.grids(p + ".image_grid"), m.ref.grids(p + ".video_grid"));
    const size_t L = ids.size();
    std::vector<int32_t> got(3 * L);
    for (size_t i = 0; i < L; ++i)
      for (size_t a = 0; a < 3; ++a) got[a * L + i] = pos.positions[i * 3 + a];
    EXPECT_EQ(got, m.ref.ints(p + ".rope_positions")) << p;
    if (m.ref.has(p + ".positions")) EXPECT_EQ(got, m.ref.ints(p + ".positions")) << p;
    EXPECT_EQ(pos.rope_delta, m.ref.ints(p + ".rope_delta")[0]) << p;
    // The engine's items (videos split into groups) give the same positions.
    const auto items = testing::qwen3vl_prompt_items(*m.model, m.ref, k);
    const auto mp = m.model->mrope_positions(ids, items.items);
    ASSERT_TRUE(mp.has_value());
    EXPECT_EQ(mp->positions, pos.positions) << p;
  }
}

// encode() puts each row's planes side by side: the merger's, then DeepStack's; a video split
// into its groups encodes to the same rows as the whole video.
TEST(Qwen3VLFixture, EncodeGivesEachRowItsPlanes) {
  SKIP_WITHOUT_FIXTURE();
  Model m;
  const int64_t C = 64, K = 2, W = (1 + K) * C;
  ASSERT_EQ(m.model->embedding_planes(), 1 + K);
  EXPECT_EQ(m.model->decoder().config().deepstack_layers, K);
  for (const std::string p : {"p1.image", "p3.video"}) {
    const auto g = m.ref.grids(p + "_grid");
    const auto px = m.ref.floats(p + "_pixels");
    const auto merged = m.ref.floats(p + "_embeds"), deep = m.ref.floats(p + "_deepstack");
    const int64_t U = static_cast<int64_t>(merged.size()) / C;
    std::vector<float> out(static_cast<size_t>(U * W));
    m.model->encode(px.data(), g, out.data());
    std::vector<float> plane(static_cast<size_t>(U * C));
    for (int64_t pl = 0; pl <= K; ++pl) {
      for (int64_t u = 0; u < U; ++u) std::copy_n(out.data() + u * W + pl * C, C, plane.data() + u * C);
      const float* want = pl == 0 ? merged.data() : deep.data() + (pl - 1) * U * C;
      EXPECT_LE(testing::max_row_rel_error(plane.data(), want, U, C), 1e-4) << p << " plane " << pl;
    }
  }
  const auto items = testing::qwen3vl_prompt_items(*m.model, m.ref, 3);
  ASSERT_EQ(items.items.size(), 2u);  // two temporal groups
  std::vector<const MediaPixels*> ptrs;
  for (const auto& it : items.items) ptrs.push_back(&it);
  std::vector<float> split(static_cast<size_t>(12 * W)), whole(split.size());
  m.model->encode_media(ptrs, split.data());
  const auto px = m.ref.floats("p3.video_pixels");
  m.model->encode(px.data(), m.ref.grids("p3.video_grid"), whole.data());
  EXPECT_EQ(split, whole);
}

std::vector<int32_t> run(const Model& m, int k, int chunk, int n, std::vector<float>& rows) {
  return testing::qwen3vl_run(*m.model, m.ref, k, chunk, n, rows);
}

TEST(Qwen3VLFixture, LogitsAndGreedyMatchHfWholeAndInChunksCuttingMediaRuns) {
  SKIP_WITHOUT_FIXTURE();
  Model m;
  const int64_t V = m.model->decoder().config().vocab_size;
  ASSERT_GE(num_cases(m.ref), 5);
  for (int k = 0; k < num_cases(m.ref); ++k) {
    const std::string p = "p" + std::to_string(k);
    const auto want_greedy = m.ref.ints(p + ".greedy");
    const auto want = m.ref.floats(p + ".logits");  // [L, V]
    for (int chunk : {1000, 7}) {
      std::vector<float> rows;
      const auto got = run(m, k, chunk, static_cast<int>(want_greedy.size()), rows);
      EXPECT_EQ(got, want_greedy) << p << " chunk " << chunk;
      EXPECT_EQ(got, m.ref.ints(p + ".generate")) << p << " chunk " << chunk;
      ASSERT_EQ(rows.size(), want.size()) << p;
      const double err = testing::max_row_rel_error(rows.data(), want.data(), static_cast<int64_t>(want.size()) / V, V);
      EXPECT_LE(err, 1e-4) << p << " chunk " << chunk;
      std::printf("%s chunk %d: max row relative error %.2e\n", p.c_str(), chunk, err);
    }
  }
}

// The DeepStack planes matter: with them zeroed the media case's logits move far beyond the
// tolerance, so the test above checks them.
TEST(Qwen3VLFixture, DeepStackPlanesChangeTheLogits) {
  SKIP_WITHOUT_FIXTURE();
  Model m;
  const ModelConfig& tc = m.model->decoder().config();
  const auto ids = m.ref.ints("p1.ids");
  const auto pi = testing::qwen3vl_prompt_items(*m.model, m.ref, 1);
  const int64_t L = static_cast<int64_t>(ids.size()), C = tc.hidden_size, W = 3 * C;
  std::vector<float> enc(static_cast<size_t>(10 * W));
  const MediaPixels* item = &pi.items.at(0);
  m.model->encode_media(std::span(&item, 1), enc.data());
  std::vector<float> with(static_cast<size_t>(L * W)), without(with.size());  // without: planes 1, 2 zero
  std::vector<uint8_t> use(static_cast<size_t>(L));
  for (int64_t t = 0; t < L; ++t) {
    const int32_t off = pi.prompt.media_offset[static_cast<size_t>(t)];
    if (off < 0) continue;
    std::copy_n(enc.data() + off * W, W, with.data() + t * W);
    std::copy_n(enc.data() + off * W, C, without.data() + t * W);
    use[static_cast<size_t>(t)] = 1;
  }
  const MropePositions pos = *m.model->mrope_positions(ids, pi.items);
  std::vector<int32_t> blocks = {0, 1, 2};
  auto logits_of = [&](const EmbeddingOverride& ov) {
    KVCache cache(KVCacheShape{tc.num_layers, 3, 16, static_cast<int>(tc.num_kv_heads), static_cast<int>(tc.head_dim),
                               DType::F32});
    SequenceChunk sc{std::span<const int32_t>(ids), 0, blocks, LogitsFor::All, {}, false};
    ForwardBatch batch = make_forward_batch(std::span(&sc, 1), 16);
    batch.mrope_positions = pos.positions;
    std::vector<float> logits;
    m.model->decoder().forward(batch, cache.layers(), logits, ov);
    return logits;
  };
  EmbeddingOverride a{with.data(), use.data()}, b{without.data(), use.data()};
  a.num_planes = b.num_planes = 3;
  const auto la = logits_of(a), lb = logits_of(b);
  const auto want = m.ref.floats("p1.logits");
  EXPECT_LE(testing::max_row_rel_error(la.data(), want.data(), L, tc.vocab_size), 1e-4);
  EXPECT_GT(testing::max_row_rel_error(lb.data(), want.data(), L, tc.vocab_size), 1e-2);
}

// The other checkpoint layout ("model.*" decoder, "visual.*" tower): the same tensors renamed load
// and give HF's greedy tokens on the two-image case.
TEST(Qwen3VLFixture, LoadsTheFlatWeightLayout) {
  SKIP_WITHOUT_FIXTURE();
  namespace fs = std::filesystem;
  const fs::path d = fs::temp_directory_path() / ("vlm_qwen3vl_flat_" + std::to_string(::getpid()));
  fs::create_directories(d);
  fs::copy_file(testing::qwen3vl_model_dir() + "/config.json", d / "config.json", fs::copy_options::overwrite_existing);
  const auto st = SafetensorsFile::open(testing::qwen3vl_model_dir() + "/model.safetensors");
  std::map<std::string, TensorView> renamed;
  for (const auto& [name, t] : st->tensors()) {
    std::string n = name;
    for (const auto& [from, to] : {std::pair<std::string, std::string>{"model.language_model.", "model."},
                                   {"model.visual.", "visual."}})
      if (n.rfind(from, 0) == 0) n = to + n.substr(from.size());
    renamed[n] = t;
  }
  ASSERT_TRUE(renamed.count("visual.patch_embed.proj.weight") && renamed.count("model.embed_tokens.weight"));
  write_safetensors((d / "model.safetensors").string(), renamed);
  Model m(d.string());
  std::vector<float> rows;
  EXPECT_EQ(run(m, 2, 1000, 8, rows), m.ref.ints("p2.greedy"));
  fs::remove_all(d);
}

}  // namespace
}  // namespace vlm

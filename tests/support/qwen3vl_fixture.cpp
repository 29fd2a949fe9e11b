#include "tests/support/qwen3vl_fixture.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <algorithm>
#include <numeric>

#include <nlohmann/json.hpp>

#include "engine/scheduling/kv_cache.h"
#include "model/decoder/forward_batch.h"
#include "model/media/qwen2vl_frames.h"
#include "model/media/qwen3vl_video.h"

namespace vlm::testing {

std::string qwen3vl_fixture_dir() { return std::string(VLM_FIXTURES_DIR) + "/qwen3vl"; }
std::string qwen3vl_model_dir() { return qwen3vl_fixture_dir() + "/qwen3_vl_tiny"; }
bool qwen3vl_fixture_present() { return std::filesystem::exists(qwen3vl_model_dir() + "/reference.safetensors"); }

std::vector<Qwen3VLCase> qwen3vl_cases() {
  std::ifstream f(qwen3vl_fixture_dir() + "/cases.json");
  const nlohmann::json j = nlohmann::json::parse(f);
  std::vector<Qwen3VLCase> out;
  for (size_t k = 0; k < j.size(); ++k) {
    const auto& e = j[k];
    if (e.contains("failed")) break;  // the run could not make this case (its log says why)
    Qwen3VLCase c;
    c.k = static_cast<int>(k);
    c.text = e.at("text").get<std::string>();
    c.rendered = e.at("rendered").get<std::string>();
    c.images = e.at("images").get<std::vector<std::string>>();
    c.videos = e.at("videos").get<std::vector<std::string>>();
    c.fps = e.at("fps").get<std::vector<double>>();
    c.frames_indices = e.at("frames_indices").get<std::vector<std::vector<int>>>();
    out.push_back(std::move(c));
  }
  return out;
}

bool Qwen3VLReference::has(const std::string& n) const { return file->tensors().count(n) != 0; }
std::vector<int32_t> Qwen3VLReference::ints(const std::string& n) const {
  if (!has(n)) throw std::runtime_error("fixture tensor missing: " + n);
  const TensorView& t = file->tensors().at(n);
  return {t.as<const int32_t>(), t.as<const int32_t>() + t.numel()};
}
std::vector<float> Qwen3VLReference::floats(const std::string& n) const {
  if (!has(n)) throw std::runtime_error("fixture tensor missing: " + n);
  const TensorView& t = file->tensors().at(n);
  return {t.as<const float>(), t.as<const float>() + t.numel()};
}
std::vector<std::array<int32_t, 3>> Qwen3VLReference::grids(const std::string& n) const {
  std::vector<std::array<int32_t, 3>> out;
  if (!has(n)) return out;
  const auto v = ints(n);
  for (size_t i = 0; i + 2 < v.size(); i += 3) out.push_back({v[i], v[i + 1], v[i + 2]});
  return out;
}

Qwen3VLReference qwen3vl_reference(const std::string& model_dir) {
  return Qwen3VLReference{SafetensorsFile::open(model_dir + "/reference.safetensors")};
}
Qwen3VLReference qwen3vl_reference() { return qwen3vl_reference(qwen3vl_model_dir()); }

namespace {

// The items of one kind (images or videos) of case p: HF's rows cut by their grids.
std::vector<MediaPixels> cut(const Qwen3VLReference& ref, const std::string& p, bool video) {
  std::vector<MediaPixels> out;
  const std::string kind = video ? ".video" : ".image";
  const auto g = ref.grids(p + kind + "_grid");
  if (g.empty()) return out;
  const auto px = ref.floats(p + kind + "_pixels");
  const size_t K = px.size() / [&] {
    size_t n = 0;
    for (const auto& x : g) n += static_cast<size_t>(x[0]) * x[1] * x[2];
    return n;
  }();
  size_t at = 0;
  for (const auto& x : g) {
    MediaPixels m;
    const size_t n = static_cast<size_t>(x[0]) * x[1] * x[2] * K;
    m.data.assign(px.begin() + static_cast<std::ptrdiff_t>(at), px.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
    m.modality = video ? Modality::Video : Modality::Image;
    m.grid_thw = x;
    m.height = x[1] * 16;
    m.width = x[2] * 16;
    m.num_frames = video ? x[0] * 2 : 1;
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace

namespace {

// images and the videos' groups (each kind in prompt order) -> the items in placeholder order
// and the tagged prompt of ids over them.
Qwen3VLPromptItems place_items(const Qwen3VLModel& model, const std::string& p, const std::vector<int32_t>& ids,
                               const std::vector<MediaPixels>& images, const std::vector<MediaPixels>& groups) {
  Qwen3VLPromptItems out;
  size_t ni = 0, nv = 0;
  const int32_t img = model.image_token_id(), vid = model.video_token_id();
  for (size_t i = 0; i < ids.size(); ++i) {
    if ((ids[i] != img && ids[i] != vid) || (i > 0 && ids[i - 1] == ids[i])) continue;  // a run's first token
    if (ids[i] == img) out.items.push_back(images.at(ni++));
    else out.items.push_back(groups.at(nv++));
  }
  if (ni != images.size() || nv != groups.size()) throw std::runtime_error(p + ": media runs do not match the grids");
  std::vector<MediaTokens> tokens;
  for (size_t j = 0; j < out.items.size(); ++j)
    tokens.push_back({out.items[j].modality, model.media_tokens(out.items[j], static_cast<int>(j)),
                      model.tokens_per_frame(out.items[j])});
  out.prompt = expand_media_tokens(ids, img, vid, tokens);
  return out;
}

}  // namespace

Qwen3VLPromptItems qwen3vl_prompt_items(const Qwen3VLModel& model, const Qwen3VLReference& ref, int k) {
  const std::string p = "p" + std::to_string(k);
  const std::vector<MediaPixels> images = cut(ref, p, false), videos = cut(ref, p, true);
  std::vector<MediaPixels> groups;  // the videos' groups, in order
  for (const MediaPixels& v : videos)
    for (MediaPixels& g : model.split_video(v)) groups.push_back(std::move(g));
  return place_items(model, p, ref.ints(p + ".ids"), images, groups);
}

std::vector<RgbImage> qwen3vl_media_frames(const std::string& name) {
  const auto media = SafetensorsFile::open(qwen3vl_fixture_dir() + "/media.safetensors");
  const TensorView& t = media->tensors().at(name);
  const bool video = t.shape.ndim == 4;
  const int64_t T = video ? t.dim(0) : 1, H = t.dim(video ? 1 : 0), W = t.dim(video ? 2 : 1);
  std::vector<RgbImage> out;
  const auto* px = static_cast<const uint8_t*>(t.data);
  for (int64_t i = 0; i < T; ++i) {
    RgbImage im;
    im.width = static_cast<int>(W);
    im.height = static_cast<int>(H);
    im.pixels.assign(px + i * H * W * 3, px + (i + 1) * H * W * 3);
    out.push_back(std::move(im));
  }
  return out;
}

Qwen3VLPromptItems qwen3vl_frames8_items(const Qwen3VLModel& model, const Qwen3VLReference& ref, int k) {
  const std::string p = "p" + std::to_string(k);
  const Qwen3VLCase c = qwen3vl_cases().at(static_cast<size_t>(k));
  const std::string proc = qwen3vl_fixture_dir() + "/processor";
  const Qwen2VLPreprocessConfig icfg = Qwen2VLPreprocessConfig::load(proc, false);
  const Qwen3VLVideoConfig vcfg = Qwen3VLVideoConfig::load(proc);
  std::vector<MediaPixels> images, groups;
  for (const std::string& n : c.images) images.push_back(qwen2vl_frames8(qwen3vl_media_frames("img." + n), icfg, Modality::Image));
  for (const std::string& n : c.videos)
    for (MediaPixels& g : model.split_video(qwen3vl_video_frames8(qwen3vl_media_frames("vid." + n), vcfg)))
      groups.push_back(std::move(g));
  return place_items(model, p, ref.ints(p + ".ids"), images, groups);
}

int64_t qwen3vl_run_blocks(int64_t L, int n) { return (L + n + 15) / 16 + 1; }

std::vector<int32_t> qwen3vl_run(const Qwen3VLModel& model, const Qwen3VLReference& ref, int k, int chunk, int n,
                                 std::vector<float>& rows, const Qwen3VLStep& step) {
  const ModelConfig& tc = model.decoder().config();
  const int64_t V = tc.vocab_size, W = model.embedding_planes() * tc.hidden_size;
  const std::string p = "p" + std::to_string(k);
  const auto ids = ref.ints(p + ".ids");
  const auto pi = qwen3vl_prompt_items(model, ref, k);
  const MropePositions pos = *model.mrope_positions(ids, pi.items);
  const int64_t L = static_cast<int64_t>(ids.size());
  std::vector<float> embeds(static_cast<size_t>(L * W));  // [L, (1 + K) C]
  std::vector<uint8_t> use(static_cast<size_t>(L));
  if (!pi.items.empty()) {
    std::vector<const MediaPixels*> ptrs;
    int64_t total = 0;
    for (size_t j = 0; j < pi.items.size(); ++j) {
      ptrs.push_back(&pi.items[j]);
      total += model.media_tokens(pi.items[j], static_cast<int>(j));
    }
    std::vector<float> enc(static_cast<size_t>(total * W));
    model.encode_media(ptrs, enc.data());
    std::vector<int64_t> first(pi.items.size() + 1, 0);
    for (size_t j = 0; j < pi.items.size(); ++j)
      first[j + 1] = first[j] + model.media_tokens(pi.items[j], static_cast<int>(j));
    for (int64_t t = 0; t < L; ++t) {
      const ModalityTag tag = pi.prompt.modalities[static_cast<size_t>(t)];
      if (tag.media_index < 0) continue;
      const int64_t row = first[static_cast<size_t>(tag.media_index)] + pi.prompt.media_offset[static_cast<size_t>(t)];
      std::copy_n(enc.data() + row * W, W, embeds.data() + t * W);
      use[static_cast<size_t>(t)] = 1;
    }
  }
  constexpr int kBlock = 16;
  KVCacheShape shape{tc.num_layers, qwen3vl_run_blocks(L, n), kBlock, static_cast<int>(tc.num_kv_heads),
                     static_cast<int>(tc.head_dim), DType::F32};
  KVCache cache(step ? KVCacheShape{tc.num_layers, 1, kBlock, shape.num_kv_heads, shape.head_dim, DType::F32} : shape);
  std::vector<int32_t> blocks(static_cast<size_t>(shape.num_blocks));
  std::iota(blocks.rbegin(), blocks.rend(), 0);
  std::vector<int32_t> seq = ids;
  std::vector<float> logits;
  for (int64_t s = 0; s < L; s += chunk) {
    const int64_t len = std::min<int64_t>(chunk, L - s);
    SequenceChunk sc{std::span<const int32_t>(seq.data() + s, len), static_cast<int32_t>(s), blocks, LogitsFor::All, {}, false};
    ForwardBatch batch = make_forward_batch(std::span(&sc, 1), kBlock);
    batch.mrope_positions.assign(pos.positions.begin() + s * 3, pos.positions.begin() + (s + len) * 3);
    EmbeddingOverride ov{embeds.data() + s * W, use.data() + s};
    ov.num_planes = model.embedding_planes();
    if (step)
      step(batch, ov, logits);
    else
      model.decoder().forward(batch, cache.layers(), logits, ov);
    rows.insert(rows.end(), logits.begin(), logits.end());
  }
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const float* last = logits.data() + logits.size() - V;
    const int32_t tok = static_cast<int32_t>(std::max_element(last, last + V) - last);
    out.push_back(tok);
    seq.push_back(tok);
    const int32_t at = static_cast<int32_t>(seq.size() - 1);
    SequenceChunk sc{std::span<const int32_t>(seq.data() + at, 1), at, blocks, LogitsFor::Last, {}, false};
    ForwardBatch batch = make_forward_batch(std::span(&sc, 1), kBlock);
    batch.mrope_positions = pos.decode(at, 1);
    if (step)
      step(batch, {}, logits);
    else
      model.decoder().forward(batch, cache.layers(), logits);
  }
  return out;
}

}  // namespace vlm::testing

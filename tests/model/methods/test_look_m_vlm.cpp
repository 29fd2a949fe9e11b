// LOOK-M fidelity on the fixture VLMs with real media (random weights). LLaVA
// (tests/fixtures/llava, MHA): prompts rendered "USER: ... <image> ... ASSISTANT:" with the
// Llama-2 tokenizer, 1 and several real images (decoded, preprocessed, CLIP-encoded and projected
// by our pipeline). Qwen2-VL (tests/fixtures/qwen2vl, GQA, M-RoPE): the fixture's prompts with
// Hugging Face's preprocessed patches of real images (and a video). Each is prefilled in chunks
// with LOOK-M, then decoded teacher-forced with the full cache's greedy tokens. Per decode step:
// relative L2 error of the logits vs the full cache and whether the argmax agrees.
//
// The tests assert what holds by construction: the compressed cache holds exactly the budget's
// N + M tokens; a budget >= L and LOOK-M off are bit-identical to the full cache; prefill logits
// are always exact; and, averaged over modes and prompts, evicting more (5%) moves the logits at
// least as much as evicting less (50%).
//
// VLM_LOOK_M_FIDELITY_TABLE=1 (optionally VLM_LOOK_M_FIDELITY_STEPS=N, default 16;
// VLM_LOOK_M_FIDELITY_BUDGETS=0.9,0.5 other budgets; VLM_LOOK_M_FIDELITY_ONLY=substring of
// "model, prompt" one case) enables
// LookMLlavaFidelity.FullTable, which prints the table of bench/RESULTS.md ("Fidelity on the
// LLaVA fixture (real images)"): llava_small (16 tokens per image, the server tests' model),
// llava_336 (576 tokens per image, LLaVA-1.5's span) and qwen2_vl_tiny, every mode, scores
// window and full, budgets 50/35/20/5%.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <sstream>

#include "engine/scheduling/kv_cache.h"
#include "kernels/kv_compression/look_m_params.h"
#include "model/families/llava.h"
#include "model/families/qwen2_vl.h"
#include "model/decoder/forward_batch.h"
#include "model/media/image_decode.h"
#include "model/media/image_preprocess.h"
#include "model/methods/look_m_state.h"
#include "model/decoder/safetensors.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/support/decoder_harness.h"
#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

const std::string kLlava = std::string(VLM_FIXTURES_DIR) + "/llava";
const std::string kQwen = std::string(VLM_FIXTURES_DIR) + "/qwen2vl";
constexpr int kBlock = 16;

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

struct PromptSpec {
  std::string name;
  std::vector<std::string> text;    // text pieces around the images: text[0] img text[1] img ...
  std::vector<std::string> images;  // files under tests/fixtures/llava/images
};

const PromptSpec kOneImage{"1 image",
                           {"USER: ", "\nWhat is shown in this image? Describe the colours, the objects and the "
                                      "background in detail. ASSISTANT:"},
                           {"cat_crop.png"}};
const PromptSpec kThreeImages{"3 images",
                              {"USER: Here are three pictures. ", " The first one. ", " Then ",
                               " Which one is the brightest, and why? ASSISTANT:"},
                              {"rocket_crop.png", "astronaut_crop.jpg", "coffee.jpg"}};
const PromptSpec kFiveImages{"5 images",
                             {"USER: Compare these photos. ", " and ", " and ", " and ", " and ",
                              " Which two were taken indoors? ASSISTANT:"},
                             {"cat_crop.png", "rocket_crop.png", "camera_crop.png", "astronaut_crop.jpg", "coffee.jpg"}};

struct DecodeRun {
  std::vector<float> prefill_logits;  // [V]
  std::vector<float> decode_logits;   // [steps, V]
  int32_t cache_len = 0;
};

// A fixture VLM with one prompt, run with and without LOOK-M.
class VlmLookM {
 public:
  virtual ~VlmLookM() = default;
  virtual int64_t vocab() const = 0;
  virtual int32_t length() const = 0;
  virtual int32_t num_text() const = 0;
  // Prefill in chunks of `chunk` (LOOK-M when enabled), then `steps` decode steps fed `feed`
  // (empty: greedy from this run's logits, written to greedy_out).
  virtual DecodeRun run(const LookMSetting& setting, int chunk, const std::vector<int32_t>& feed,
                        std::vector<int32_t>* greedy_out = nullptr) = 0;
};

int32_t count_text(const std::vector<ModalityTag>& tags) {
  return static_cast<int32_t>(
      std::count_if(tags.begin(), tags.end(), [](const ModalityTag& t) { return t.modality == Modality::Text; }));
}

// A paged f32 cache for one sequence of up to `tokens` tokens, its blocks in reversed order.
struct OneSeqKV {
  std::unique_ptr<KVCache> cache;
  std::vector<int32_t> table;
  OneSeqKV(const ModelConfig& c, int64_t tokens) {
    KVCacheShape s;
    s.num_layers = c.num_layers;
    s.num_blocks = (tokens + kBlock - 1) / kBlock + 2;
    s.block_size = kBlock;
    s.num_kv_heads = static_cast<int>(c.num_kv_heads);
    s.head_dim = static_cast<int>(c.head_dim);
    s.dtype = DType::F32;
    cache = std::make_unique<KVCache>(s);
    table.resize(static_cast<size_t>(s.num_blocks));
    std::iota(table.rbegin(), table.rend(), 0);  // non-contiguous order
  }
  std::span<const int32_t> blocks_for(int64_t n) const {
    return {table.data(), static_cast<size_t>((n + kBlock - 1) / kBlock)};
  }
};

// One LLaVA fixture with one prompt: its tagged tokens and image embeddings.
class LlavaLookM : public VlmLookM {
 public:
  LlavaLookM(const std::string& model, const std::string& processor, const PromptSpec& spec, int steps)
      : model_(LlavaModel::load(kLlava + "/" + model)), steps_(steps) {
    const auto tok = Tokenizer::load(llava_model_dir());
    std::vector<int32_t> ids = {1};  // <s>
    for (size_t i = 0; i < spec.text.size(); ++i) {
      const auto piece = tok->encode(spec.text[i], false);
      ids.insert(ids.end(), piece.begin(), piece.end());
      if (i < spec.images.size()) ids.push_back(model_->image_token_id());
    }
    prompt_ = model_->build_prompt(ids, static_cast<int32_t>(spec.images.size()));
    const ImagePreprocessor pre(ImagePreprocessConfig::load(kLlava + "/processors/" + processor));
    const int64_t C = model_->decoder().config().hidden_size, Ti = model_->tokens_per_image();
    embeds_.resize(spec.images.size() * Ti * C);
    for (size_t k = 0; k < spec.images.size(); ++k) {
      const std::vector<float> px = pre.preprocess(decode_image(read_bytes(kLlava + "/images/" + spec.images[k])));
      model_->encode_images(px.data(), 1, embeds_.data() + k * Ti * C);
    }
    kv_ = std::make_unique<OneSeqKV>(model_->decoder().config(), prompt_.size() + steps);
  }

  int64_t vocab() const override { return model_->decoder().config().vocab_size; }
  int32_t length() const override { return static_cast<int32_t>(prompt_.size()); }
  int32_t num_text() const override { return count_text(prompt_.modalities); }

  DecodeRun run(const LookMSetting& setting, int chunk, const std::vector<int32_t>& feed,
                std::vector<int32_t>* greedy_out = nullptr) override {
    const ModelConfig& mc = model_->decoder().config();
    const int64_t C = mc.hidden_size, Ti = model_->tokens_per_image();
    const int32_t L = length();
    std::unique_ptr<LookMState> st;
    if (setting.enabled)
      st = std::make_unique<LookMState>(setting.params, static_cast<int>(mc.num_layers),
                                        static_cast<int>(mc.num_kv_heads), L, prompt_.modalities);
    std::vector<const float*> media;
    for (int32_t k = 0; k < prompt_.num_media; ++k) media.push_back(embeds_.data() + k * Ti * C);
    DecodeRun r;
    std::vector<float> logits;
    for (int32_t p0 = 0; p0 < L; p0 += chunk) {
      const int32_t n = std::min(chunk, L - p0);
      SequenceChunk c;
      c.token_ids = {prompt_.token_ids.data() + p0, static_cast<size_t>(n)};
      c.start_pos = p0;
      c.block_table = kv_->blocks_for(p0 + n);
      c.modalities = {prompt_.modalities.data() + p0, static_cast<size_t>(n)};
      c.finishes_prefill = p0 + n == L;
      ForwardBatch fb = make_forward_batch(std::span<const SequenceChunk>(&c, 1), kBlock);
      if (st) fb.look_m = {st.get()};
      std::vector<float> emb(static_cast<size_t>(n * C));
      std::vector<uint8_t> use(static_cast<size_t>(n));
      gather_media_embeddings(prompt_, p0, n, media, C, emb.data(), use.data());
      model_->decoder().forward(fb, kv_->cache->layers(), logits, EmbeddingOverride{emb.data(), use.data()});
    }
    r.prefill_logits = logits;
    r.cache_len = st ? st->compressed_len : L;
    int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    for (int i = 0; i < steps_; ++i) {
      const int32_t tok = feed.empty() ? next : feed[static_cast<size_t>(i)];
      if (greedy_out) greedy_out->push_back(tok);
      SequenceChunk c;
      c.token_ids = {&tok, 1};
      c.start_pos = r.cache_len + i;  // physical slot
      c.block_table = kv_->blocks_for(r.cache_len + i + 1);
      ForwardBatch fb = make_forward_batch(std::span<const SequenceChunk>(&c, 1), kBlock);
      fb.positions[0] = L + i;  // logical RoPE position continues from the original length
      model_->decoder().forward(fb, kv_->cache->layers(), logits);
      r.decode_logits.insert(r.decode_logits.end(), logits.begin(), logits.end());
      next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    return r;
  }

 private:
  std::unique_ptr<LlavaModel> model_;
  int steps_;
  MultimodalPrompt prompt_;
  std::vector<float> embeds_;  // [num_images, Ti, C]
  std::unique_ptr<OneSeqKV> kv_;
};

// A Qwen2-VL fixture prompt pk (tests/fixtures/qwen2vl/<model>/reference.safetensors) with HF's
// preprocessed patches: M-RoPE positions (decode continues at logical position + rope_delta),
// image and video tokens tagged with their item.
class Qwen2VLLookM : public VlmLookM {
 public:
  using Grid = std::array<int32_t, 3>;
  Qwen2VLLookM(const std::string& model, int k, int steps)
      : model_(Qwen2VLModel::load(kQwen + "/" + model)), steps_(steps) {
    const auto ref = SafetensorsFile::open(kQwen + "/" + model + "/reference.safetensors");
    const auto pre = SafetensorsFile::open(kQwen + "/preprocess.safetensors");
    const std::string p = "p" + std::to_string(k);
    auto ints = [&](const std::string& name) {
      const TensorView& t = ref->tensors().at(name);
      return std::vector<int32_t>(t.as<const int32_t>(), t.as<const int32_t>() + t.numel());
    };
    auto grids = [&](const std::string& name) {
      std::vector<Grid> out;
      if (!ref->tensors().count(name)) return out;
      const auto v = ints(name);
      for (size_t i = 0; i + 2 < v.size(); i += 3) out.push_back({v[i], v[i + 1], v[i + 2]});
      return out;
    };
    ids_ = ints(p + ".ids");
    const auto ig = grids(p + ".image_grid"), vg = grids(p + ".video_grid");
    pos_ = model_->positions(ids_, ig, vg);
    // The media of the fixture prompts (as tests/model/families/test_qwen2vl.cpp): real images and a video.
    static const std::vector<std::vector<std::string>> images = {{"cat"}, {}, {"synth", "rocket"}, {"coffee"}};
    static const std::vector<std::vector<std::string>> videos = {{}, {"shapes4"}, {"shapes4"}, {}};
    const int64_t C = model_->decoder().config().hidden_size;
    auto encode = [&](const std::vector<Grid>& g, const std::vector<std::string>& names, const char* proc) {
      std::vector<float> px, out;
      int64_t rows = 0;
      for (const auto& x : g) rows += int64_t(x[0]) * x[1] * x[2] / 4;
      for (const auto& n : names) {
        const TensorView& t = pre->tensors().at(std::string(proc) + n + ".pixels");
        px.insert(px.end(), t.as<const float>(), t.as<const float>() + t.numel());
      }
      out.resize(static_cast<size_t>(rows * C));
      if (rows > 0) model_->encode(px.data(), g, out.data());
      return out;
    };
    const auto img = encode(ig, images.at(size_t(k)), "img_small."), vid = encode(vg, videos.at(size_t(k)), "vid_small.");
    const int64_t L = static_cast<int64_t>(ids_.size());
    embeds_.assign(static_cast<size_t>(L * C), 0.f);
    use_.assign(static_cast<size_t>(L), 0);
    tags_.assign(static_cast<size_t>(L), ModalityTag{});
    int64_t ni = 0, nv = 0;
    auto item_of = [](const std::vector<Grid>& g, int64_t row) {
      int32_t item = 0;
      for (const auto& x : g) {
        row -= int64_t(x[0]) * x[1] * x[2] / 4;
        if (row < 0) return item;
        ++item;
      }
      return item;
    };
    for (int64_t t = 0; t < L; ++t) {
      const bool im = ids_[t] == model_->config().image_token_id, vi = ids_[t] == model_->config().video_token_id;
      if (!im && !vi) continue;
      const float* src = im ? img.data() + ni * C : vid.data() + nv * C;
      tags_[size_t(t)] = im ? ModalityTag{Modality::Image, item_of(ig, ni)}
                            : ModalityTag{Modality::Video, int32_t(ig.size()) + item_of(vg, nv)};
      (im ? ni : nv)++;
      std::copy(src, src + C, embeds_.begin() + t * C);
      use_[size_t(t)] = 1;
    }
    kv_ = std::make_unique<OneSeqKV>(model_->decoder().config(), L + steps);
  }

  int64_t vocab() const override { return model_->decoder().config().vocab_size; }
  int32_t length() const override { return static_cast<int32_t>(ids_.size()); }
  int32_t num_text() const override { return count_text(tags_); }

  DecodeRun run(const LookMSetting& setting, int chunk, const std::vector<int32_t>& feed,
                std::vector<int32_t>* greedy_out = nullptr) override {
    const ModelConfig& mc = model_->decoder().config();
    const int64_t C = mc.hidden_size;
    const int32_t L = length();
    std::unique_ptr<LookMState> st;
    if (setting.enabled)
      st = std::make_unique<LookMState>(setting.params, static_cast<int>(mc.num_layers),
                                        static_cast<int>(mc.num_kv_heads), L, tags_);
    DecodeRun r;
    std::vector<float> logits;
    for (int32_t p0 = 0; p0 < L; p0 += chunk) {
      const int32_t n = std::min(chunk, L - p0);
      SequenceChunk c;
      c.token_ids = {ids_.data() + p0, static_cast<size_t>(n)};
      c.start_pos = p0;
      c.block_table = kv_->blocks_for(p0 + n);
      c.modalities = {tags_.data() + p0, static_cast<size_t>(n)};
      c.finishes_prefill = p0 + n == L;
      ForwardBatch fb = make_forward_batch(std::span<const SequenceChunk>(&c, 1), kBlock);
      fb.mrope_positions.assign(pos_.positions.begin() + int64_t(p0) * 3, pos_.positions.begin() + int64_t(p0 + n) * 3);
      if (st) fb.look_m = {st.get()};
      model_->decoder().forward(fb, kv_->cache->layers(), logits,
                                EmbeddingOverride{embeds_.data() + int64_t(p0) * C, use_.data() + p0});
    }
    r.prefill_logits = logits;
    r.cache_len = st ? st->compressed_len : L;
    int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    for (int i = 0; i < steps_; ++i) {
      const int32_t tok = feed.empty() ? next : feed[static_cast<size_t>(i)];
      if (greedy_out) greedy_out->push_back(tok);
      SequenceChunk c;
      c.token_ids = {&tok, 1};
      c.start_pos = r.cache_len + i;  // physical slot
      c.block_table = kv_->blocks_for(r.cache_len + i + 1);
      ForwardBatch fb = make_forward_batch(std::span<const SequenceChunk>(&c, 1), kBlock);
      fb.mrope_positions = pos_.decode(L + i, 1);  // logical position, as without compression
      model_->decoder().forward(fb, kv_->cache->layers(), logits);
      r.decode_logits.insert(r.decode_logits.end(), logits.begin(), logits.end());
      next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    return r;
  }

 private:
  std::unique_ptr<Qwen2VLModel> model_;
  int steps_;
  std::vector<int32_t> ids_;
  MropePositions pos_;
  std::vector<ModalityTag> tags_;  // [L]
  std::vector<float> embeds_;      // [L, C] (media rows only)
  std::vector<uint8_t> use_;       // [L]
  std::unique_ptr<OneSeqKV> kv_;
};

int argmax(const float* x, int64_t n) { return static_cast<int>(std::max_element(x, x + n) - x); }

struct Fidelity {
  double mean_err = 0, max_err = 0, agree = 0;
};

Fidelity compare(const DecodeRun& r, const DecodeRun& exact, int64_t V, int steps) {
  Fidelity f;
  for (int i = 0; i < steps; ++i) {
    const float* a = r.decode_logits.data() + int64_t(i) * V;
    const float* e = exact.decode_logits.data() + int64_t(i) * V;
    const double err = max_row_rel_error(a, e, 1, V);
    f.mean_err += err / steps;
    f.max_err = std::max(f.max_err, err);
    f.agree += (argmax(a, V) == argmax(e, V)) / double(steps);
  }
  return f;
}

LookMSetting setting(const char* mode, LookMScores scores, double budget) {
  LookMSetting s{true, *look_m_mode_from_name(mode)};
  s.params.scores = scores;
  s.params.recent_ratio = s.params.important_ratio = budget / 2;
  return s;
}

// Budget >= L and off are bit-identical; prefill logits exact; the budget is met exactly. LLaVA
// (MHA) with 1 and 5 real images, Qwen2-VL (GQA, M-RoPE) with 2 images and a video.
void expect_exact_and_budget(VlmLookM& m, int chunk, int steps, const std::string& name) {
  const int32_t L = m.length();
  std::vector<int32_t> greedy;
  const DecodeRun exact = m.run({}, chunk, {}, &greedy);
  LookMSetting noop{true, {}};
  noop.params.recent_tokens = L / 2;
  noop.params.important_tokens = L - L / 2;  // budget = L: nothing evicted
  const DecodeRun same = m.run(noop, chunk, greedy);
  EXPECT_EQ(same.cache_len, L) << name;
  EXPECT_EQ(same.prefill_logits, exact.prefill_logits) << name;
  EXPECT_EQ(same.decode_logits, exact.decode_logits) << name;
  for (const char* mode : {"text-prior-pivot", "text-prior-weighted", "avg", "h2o"}) {
    for (LookMScores scores : {LookMScores::Window, LookMScores::Full}) {
      const LookMSetting s = setting(mode, scores, 0.35);
      const DecodeRun r = m.run(s, chunk, greedy);
      EXPECT_EQ(r.cache_len, look_m_budget(s.params, L).kept()) << name << " " << mode;
      EXPECT_LT(r.cache_len, L);
      EXPECT_EQ(r.prefill_logits, exact.prefill_logits) << name << " " << mode;  // compression only changes decode
      EXPECT_TRUE(std::isfinite(compare(r, exact, m.vocab(), steps).max_err)) << name << " " << mode;
    }
  }
}

TEST(LookMLlava, OffNoOpAndPrefillAreExactBudgetIsMet) {
  constexpr int kSteps = 6;
  for (const PromptSpec* spec : {&kOneImage, &kFiveImages}) {
    LlavaLookM m("llava_small", "clip56_pad", *spec, kSteps);
    expect_exact_and_budget(m, 13, kSteps, spec->name);
  }
}

TEST(LookMQwen2VL, OffNoOpAndPrefillAreExactBudgetIsMet) {
  constexpr int kSteps = 6;
  Qwen2VLLookM m("qwen2_vl_tiny", 2, kSteps);
  expect_exact_and_budget(m, 17, kSteps, "qwen2_vl_tiny p2");
}

TEST(LookMLlava, EvictingMoreMovesTheLogitsMoreOnAverage) {
  constexpr int kSteps = 8;
  double err50 = 0, err5 = 0;
  for (const PromptSpec* spec : {&kOneImage, &kThreeImages}) {
    LlavaLookM m("llava_small", "clip56_pad", *spec, kSteps);
    std::vector<int32_t> greedy;
    const DecodeRun exact = m.run({}, 32, {}, &greedy);
    for (const char* mode : {"text-prior-pivot", "text-prior-h2o", "pivot", "h2o"}) {
      err50 += compare(m.run(setting(mode, LookMScores::Window, 0.50), 32, greedy), exact, m.vocab(), kSteps).mean_err;
      err5 += compare(m.run(setting(mode, LookMScores::Window, 0.05), 32, greedy), exact, m.vocab(), kSteps).mean_err;
    }
  }
  RecordProperty("mean_rel_err_50", std::to_string(err50 / 8));
  RecordProperty("mean_rel_err_5", std::to_string(err5 / 8));
  EXPECT_GT(err50, 0.0);
  EXPECT_LE(err50, err5);
}

// The full table (bench/RESULTS.md); off unless VLM_LOOK_M_FIDELITY_TABLE is set.
TEST(LookMLlavaFidelity, FullTable) {
  if (!std::getenv("VLM_LOOK_M_FIDELITY_TABLE")) GTEST_SKIP() << "set VLM_LOOK_M_FIDELITY_TABLE=1 to print the table";
  const char* steps_env = std::getenv("VLM_LOOK_M_FIDELITY_STEPS");
  const int steps = steps_env ? std::atoi(steps_env) : 16;
  struct Case {
    std::string model, prompt;
    std::function<std::unique_ptr<VlmLookM>()> make;
    int chunk;
  };
  const Case cases[] = {
      {"llava_small", "1 image", [&] { return std::make_unique<LlavaLookM>("llava_small", "clip56_pad", kOneImage, steps); }, 32},
      {"llava_small", "5 images", [&] { return std::make_unique<LlavaLookM>("llava_small", "clip56_pad", kFiveImages, steps); }, 32},
      {"llava_336", "1 image", [&] { return std::make_unique<LlavaLookM>("llava_336", "clip336", kOneImage, steps); }, 256},
      {"llava_336", "3 images", [&] { return std::make_unique<LlavaLookM>("llava_336", "clip336", kThreeImages, steps); }, 256},
      {"qwen2_vl_tiny", "fixture p0 (1 image)", [&] { return std::make_unique<Qwen2VLLookM>("qwen2_vl_tiny", 0, steps); }, 16},
      {"qwen2_vl_tiny", "fixture p2 (2 images, 1 video)", [&] { return std::make_unique<Qwen2VLLookM>("qwen2_vl_tiny", 2, steps); }, 16},
  };
  const char* modes[] = {"text-prior-pivot", "text-prior-avg", "text-prior-weighted", "text-prior-h2o",
                         "pivot", "avg", "weighted", "h2o"};
  std::vector<double> budgets = {0.50, 0.35, 0.20, 0.05};
  if (const char* b = std::getenv("VLM_LOOK_M_FIDELITY_BUDGETS")) {  // e.g. "0.99,0.9"
    budgets.clear();
    std::istringstream in(b);
    for (std::string x; std::getline(in, x, ',');) budgets.push_back(std::stod(x));
  }
  const char* only = std::getenv("VLM_LOOK_M_FIDELITY_ONLY");  // substring of "model, prompt"
  for (const Case& c : cases) {
    if (only && (c.model + ", " + c.prompt).find(only) == std::string::npos) continue;
    const std::unique_ptr<VlmLookM> mp = c.make();
    VlmLookM& m = *mp;
    std::vector<int32_t> greedy;
    const DecodeRun exact = m.run({}, c.chunk, {}, &greedy);
    for (LookMScores scores : {LookMScores::Window, LookMScores::Full}) {
      std::printf("\n%s, %s: L = %d (%d text, %d image tokens), scores %s, %d teacher-forced decode steps; "
                  "mean rel. logit error / greedy agreement\n\n",
                  c.model.c_str(), c.prompt.c_str(), m.length(), m.num_text(), m.length() - m.num_text(),
                  look_m_scores_name(scores), steps);
      std::printf("| mode |");
      for (double b : budgets) std::printf(" %d%% (%d kept) |", int(b * 100 + 0.5),
                                           look_m_budget(setting("h2o", scores, b).params, m.length()).kept());
      std::printf("\n| --- |");
      for (size_t i = 0; i < budgets.size(); ++i) std::printf(" ---: |");
      std::printf("\n");
      for (const char* mode : modes) {
        std::printf("| %s |", mode);
        for (double b : budgets) {
          const LookMSetting s = setting(mode, scores, b);
          const DecodeRun r = m.run(s, c.chunk, greedy);
          EXPECT_EQ(r.cache_len, look_m_budget(s.params, m.length()).kept());
          const Fidelity f = compare(r, exact, m.vocab(), steps);
          std::printf(" %.3f / %.2f |", f.mean_err, f.agree);
        }
        std::printf("\n");
        std::fflush(stdout);
      }
    }
  }
}

}  // namespace
}  // namespace vlm::testing

// LLaVA against transformers 5.17 (tests/fixtures/llava): vision features, projector output,
// logits (<= 1e-4 relative, fed HF's pixel_values), greedy generations token for token, prompt
// expansion/tags, both checkpoint layouts, architecture dispatch.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "engine/scheduling/kv_cache.h"
#include "kernels/core/check.h"
#include "model/families/architecture.h"
#include "model/families/llava.h"
#include "model/decoder/forward_batch.h"
#include "model/decoder/safetensors.h"
#include "tests/support/decoder_harness.h"

namespace vlm {
namespace {

const std::string kDir = std::string(VLM_FIXTURES_DIR) + "/llava";

std::vector<int32_t> ints(const SafetensorsFile& f, const std::string& name) {
  const TensorView& t = f.tensors().at(name);
  const auto* p = t.as<const int32_t>();
  return std::vector<int32_t>(p, p + t.numel());
}

const float* floats(const SafetensorsFile& f, const std::string& name) {
  return f.tensors().at(name).as<const float>();
}

int num_prompts(const SafetensorsFile& f) {
  int n = 0;
  while (f.tensors().count("p" + std::to_string(n) + ".ids")) ++n;
  return n;
}

// Max over rows of the relative L2 error.
double rel_err(const float* ours, const float* ref, int64_t rows, int64_t n) {
  return testing::max_row_rel_error(ours, ref, rows, n);
}

struct Case {
  std::unique_ptr<LlavaModel> model;
  std::unique_ptr<SafetensorsFile> ref;
  std::unique_ptr<SafetensorsFile> pre;
  std::string name;

  explicit Case(const std::string& model_name)
      : model(LlavaModel::load(kDir + "/" + model_name)),
        ref(SafetensorsFile::open(kDir + "/" + model_name + "/reference.safetensors")),
        pre(SafetensorsFile::open(kDir + "/preprocess.safetensors")),
        name(model_name) {}

  // HF's pixel_values of prompt k: stored with the prompt, or (336 model) in the preprocess file.
  const float* pixels(int k) const {
    auto it = ref->tensors().find("p" + std::to_string(k) + ".pixels");
    if (it != ref->tensors().end()) return it->second.as<const float>();
    return floats(*pre, "clip336.coffee.pixels");
  }
  int64_t num_images(int k) const {
    return ref->tensors().at("p" + std::to_string(k) + ".vision").dim(0);
  }
};

// Runs a prompt through the decoder in prefill chunks of `chunk` tokens, then greedy decoding of
// n tokens. Returns the generated tokens; `row_logits` gets the logits of every prompt row.
std::vector<int32_t> run_prompt(const LlavaModel& m, const MultimodalPrompt& prompt,
                                const std::vector<float>& image_embeds /*[N, Ti, C]*/, int chunk, int n,
                                std::vector<float>* row_logits) {
  const ModelConfig& tc = m.decoder().config();
  const int64_t C = tc.hidden_size, V = tc.vocab_size, Ti = m.tokens_per_image();
  constexpr int kBlock = 16;
  const int64_t total = prompt.size() + n;
  KVCacheShape shape{tc.num_layers, (total + kBlock - 1) / kBlock + 1, kBlock,
                     static_cast<int>(tc.num_kv_heads), static_cast<int>(tc.head_dim), DType::F32};
  KVCache cache(shape);
  std::vector<int32_t> blocks(static_cast<size_t>(shape.num_blocks));
  std::iota(blocks.rbegin(), blocks.rend(), 0);  // reversed: non-contiguous order
  std::vector<const float*> media;
  for (int32_t k = 0; k < prompt.num_media; ++k) media.push_back(image_embeds.data() + k * Ti * C);

  std::vector<int32_t> seq = prompt.token_ids;
  std::vector<float> logits;
  if (row_logits) row_logits->clear();
  for (int64_t pos = 0; pos < prompt.size(); pos += chunk) {
    const int64_t len = std::min<int64_t>(chunk, prompt.size() - pos);
    SequenceChunk sc{std::span<const int32_t>(seq.data() + pos, len), static_cast<int32_t>(pos), blocks,
                     LogitsFor::All};
    ForwardBatch batch = make_forward_batch(std::span(&sc, 1), kBlock);
    std::vector<float> embeds(static_cast<size_t>(len * C));
    std::vector<uint8_t> use(static_cast<size_t>(len));
    gather_media_embeddings(prompt, pos, len, media, C, embeds.data(), use.data());
    m.decoder().forward(batch, cache.layers(), logits, EmbeddingOverride{embeds.data(), use.data()});
    if (row_logits) row_logits->insert(row_logits->end(), logits.begin(), logits.end());
  }
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const float* last = logits.data() + logits.size() - V;
    const int32_t tok = static_cast<int32_t>(std::max_element(last, last + V) - last);
    out.push_back(tok);
    seq.push_back(tok);
    SequenceChunk sc{std::span<const int32_t>(seq.data() + seq.size() - 1, 1),
                     static_cast<int32_t>(seq.size() - 1), blocks, LogitsFor::Last};
    ForwardBatch batch = make_forward_batch(std::span(&sc, 1), kBlock);
    m.decoder().forward(batch, cache.layers(), logits);  // text tokens: no override
  }
  return out;
}

TEST(LlavaConfig, ReadsTransformers5Layout) {
  const LlavaConfig c = LlavaConfig::load(kDir + "/llava_small");
  EXPECT_EQ(c.image_token_id, 32000);
  EXPECT_EQ(c.feature_layers, std::vector<int>{2});  // -2 of 4 hidden states
  EXPECT_TRUE(c.drop_cls);
  EXPECT_EQ(c.tokens_per_image(), 16);
  EXPECT_EQ(c.text.vocab_size, 32064);
  EXPECT_EQ(c.vision.act, VisionActivation::QuickGelu);
  EXPECT_EQ(LlavaConfig::load(kDir + "/llava_336").tokens_per_image(), 576);
}

// The config.json of llava-hf/llava-1.5-7b-hf (transformers 4.x): sparse sub-configs.
TEST(LlavaConfig, ReadsReleasedCheckpointLayoutWithDefaults) {
  const auto j = nlohmann::json::parse(R"({
    "architectures": ["LlavaForConditionalGeneration"], "ignore_index": -100,
    "image_token_index": 32000, "model_type": "llava", "pad_token_id": 32001,
    "projector_hidden_act": "gelu",
    "text_config": {"_name_or_path": "lmsys/vicuna-7b-v1.5", "architectures": ["LlamaForCausalLM"],
      "max_position_embeddings": 4096, "model_type": "llama", "rms_norm_eps": 1e-05,
      "torch_dtype": "float16", "vocab_size": 32064},
    "tie_word_embeddings": false, "torch_dtype": "float16", "transformers_version": "4.36.0.dev0",
    "vision_config": {"hidden_size": 1024, "image_size": 336, "intermediate_size": 4096,
      "model_type": "clip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 24,
      "patch_size": 14, "projection_dim": 768, "vocab_size": 32000},
    "vision_feature_layer": -2, "vision_feature_select_strategy": "default", "vocab_size": 32064})");
  const LlavaConfig c = LlavaConfig::from_json(j, "config.json");
  EXPECT_EQ(c.text.hidden_size, 4096);
  EXPECT_EQ(c.text.num_layers, 32);
  EXPECT_EQ(c.text.num_kv_heads, 32);
  EXPECT_EQ(c.text.intermediate_size, 11008);
  EXPECT_EQ(c.text.vocab_size, 32064);
  EXPECT_EQ(c.text.dtype, DType::F16);
  EXPECT_EQ(c.vision.hidden_size, 1024);
  EXPECT_EQ(c.vision.act, VisionActivation::QuickGelu);
  EXPECT_EQ(c.feature_layers, std::vector<int>{23});
  EXPECT_EQ(c.tokens_per_image(), 576);

  auto bad = j;
  bad["vision_feature_select_strategy"] = "cls";
  EXPECT_THROW(LlavaConfig::from_json(bad, "c"), LoadError);
  bad = j;
  bad["vision_feature_layer"] = 25;
  EXPECT_THROW(LlavaConfig::from_json(bad, "c"), LoadError);
  bad = j;
  bad["projector_hidden_act"] = "relu";
  EXPECT_THROW(LlavaConfig::from_json(bad, "c"), LoadError);
  auto full = j;
  full["vision_feature_select_strategy"] = "full";
  full["vision_feature_layer"] = nlohmann::json::array({-1, 0, 12});
  const LlavaConfig f = LlavaConfig::from_json(full, "c");
  EXPECT_EQ(f.feature_layers, (std::vector<int>{24, 0, 12}));
  EXPECT_EQ(f.tokens_per_image(), 577);
}

TEST(Architecture, DispatchAndClearError) {
  EXPECT_EQ(detect_architecture(kDir + "/llava_small"), ModelArchitecture::Llava);
  EXPECT_EQ(detect_architecture(std::string(VLM_FIXTURES_DIR) + "/models/llama_tiny"),
            ModelArchitecture::CausalLM);
  const auto dir = std::filesystem::temp_directory_path() / "vlm_arch_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"architectures": ["Qwen2VLForConditionalGeneration"]})";
  EXPECT_EQ(detect_architecture(dir.string()), ModelArchitecture::Qwen2VL);
  std::ofstream(dir / "config.json") << R"({"architectures": ["Qwen2_5_VLForConditionalGeneration"]})";
  EXPECT_EQ(detect_architecture(dir.string()), ModelArchitecture::Qwen2VL);
  std::ofstream(dir / "config.json") << R"({"architectures": ["Qwen3ForCausalLM"]})";
  EXPECT_EQ(detect_architecture(dir.string()), ModelArchitecture::CausalLM);
  std::ofstream(dir / "config.json") << R"({"model_type": "qwen3"})";
  EXPECT_EQ(detect_architecture(dir.string()), ModelArchitecture::CausalLM);
  std::ofstream(dir / "config.json") << R"({"architectures": ["Qwen3VLForConditionalGeneration"]})";
  EXPECT_EQ(detect_architecture(dir.string()), ModelArchitecture::Qwen3VL);
  std::ofstream(dir / "config.json") << R"({"model_type": "qwen3_vl"})";
  EXPECT_EQ(detect_architecture(dir.string()), ModelArchitecture::Qwen3VL);
  std::ofstream(dir / "config.json") << R"({"architectures": ["Qwen3VLMoeForConditionalGeneration"]})";
  EXPECT_EQ(detect_architecture(dir.string()), ModelArchitecture::Qwen3VL);  // the MoE one (Qwen3VLConfig reads it)
  std::ofstream(dir / "config.json") << R"({"model_type": "qwen3_vl_moe"})";
  EXPECT_EQ(detect_architecture(dir.string()), ModelArchitecture::Qwen3VL);
  std::ofstream(dir / "config.json") << R"({"architectures": ["MllamaForConditionalGeneration"]})";
  try {
    detect_architecture(dir.string());
    ADD_FAILURE() << "no error";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("MllamaForConditionalGeneration"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

class LlavaFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(LlavaFixture, VisionFeaturesAndProjectorMatchHf) {
  Case c(GetParam());
  const int64_t Ti = c.model->tokens_per_image();
  const int64_t Cv = c.model->config().vision.hidden_size, C = c.model->config().text.hidden_size;
  for (int k = 0; k < num_prompts(*c.ref); ++k) {
    const int64_t N = c.num_images(k);
    std::vector<float> feats(static_cast<size_t>(N * Ti * Cv)), proj(static_cast<size_t>(N * Ti * C));
    c.model->vision_features(c.pixels(k), N, feats.data());
    c.model->encode_images(c.pixels(k), N, proj.data());
    const std::string p = "p" + std::to_string(k);
    EXPECT_LE(rel_err(feats.data(), floats(*c.ref, p + ".vision"), N * Ti, Cv), 1e-4) << p;
    EXPECT_LE(rel_err(proj.data(), floats(*c.ref, p + ".proj"), N * Ti, C), 1e-4) << p;
  }
}

TEST_P(LlavaFixture, LogitsAndGreedyGenerationMatchHf) {
  Case c(GetParam());
  const int64_t V = c.model->config().text.vocab_size, C = c.model->config().text.hidden_size;
  for (int k = 0; k < num_prompts(*c.ref); ++k) {
    const std::string p = "p" + std::to_string(k);
    const int64_t N = c.num_images(k);
    const std::vector<int32_t> ids = ints(*c.ref, p + ".ids");
    const MultimodalPrompt prompt = c.model->build_prompt(ids, static_cast<int32_t>(N));
    ASSERT_EQ(prompt.token_ids, ids) << p;  // HF's processor already expanded the placeholders
    std::vector<float> embeds(static_cast<size_t>(N * c.model->tokens_per_image() * C));
    c.model->encode_images(c.pixels(k), N, embeds.data());

    const std::vector<int32_t> greedy = ints(*c.ref, p + ".greedy");
    const std::vector<int32_t> generate = ints(*c.ref, p + ".generate");
    std::vector<float> rows;
    const int chunk = prompt.size() > 128 ? 100 : 7;  // chunk edges fall inside image runs
    const std::vector<int32_t> ours =
        run_prompt(*c.model, prompt, embeds, chunk, static_cast<int>(greedy.size()), &rows);
    const std::vector<int32_t> logit_rows = ints(*c.ref, p + ".logit_rows");
    std::vector<float> sel;
    for (int32_t r : logit_rows) sel.insert(sel.end(), rows.begin() + r * V, rows.begin() + (r + 1) * V);
    EXPECT_LE(rel_err(sel.data(), floats(*c.ref, p + ".logits"), static_cast<int64_t>(logit_rows.size()), V),
              1e-4)
        << p;
    EXPECT_EQ(ours, greedy) << p;
    ASSERT_LE(generate.size(), ours.size());
    EXPECT_EQ(std::vector<int32_t>(ours.begin(), ours.begin() + static_cast<ptrdiff_t>(generate.size())),
              generate)
        << p;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, LlavaFixture, ::testing::Values("llava_small", "llava_336"));

// Every CLIP hidden state, with the class token, and a list of layers concatenated.
TEST(LlavaVision, AnyHiddenStateAndLayerListsMatchHf) {
  const std::string dir = kDir + "/llava_small";
  const LlavaConfig cfg = LlavaConfig::load(dir);
  const WeightStore w = WeightStore::open(dir);
  const WeightLookup lookup = [&w](const std::string& n, const Shape& s) { return w.get(n, s); };
  const ClipVisionEncoder enc(cfg.vision, lookup, "vision_tower.", cfg.vision.num_layers);
  auto ref = SafetensorsFile::open(dir + "/reference.safetensors");
  const TensorView hidden = ref->tensors().at("p1.hidden");  // [N, layers + 1, P + 1, Cv]
  const int64_t N = hidden.dim(0), NH = hidden.dim(1), L = hidden.dim(2), Cv = hidden.dim(3);
  const std::vector<int> layers = {3, 0, 1};
  std::vector<float> out(static_cast<size_t>(N * L * Cv * 3));
  enc.encode(floats(*ref, "p1.pixels"), N, layers, /*drop_cls=*/false, out.data());
  std::vector<float> want(out.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t t = 0; t < L; ++t)
      for (size_t j = 0; j < layers.size(); ++j)
        std::copy_n(hidden.as<const float>() + ((n * NH + layers[j]) * L + t) * Cv, Cv,
                    want.data() + ((n * L + t) * 3 + static_cast<int64_t>(j)) * Cv);
  EXPECT_LE(rel_err(out.data(), want.data(), N * L, Cv * 3), 1e-4);
}

// transformers 5.17 saves "language_model.model.*", "language_model.lm_head.*", "vision_tower.*"
// and "multi_modal_projector.*" (the fixture); released 4.x checkpoints nest the tower as
// "vision_tower.vision_model.*"; 5.x models name them "model.language_model.*", "lm_head.*",
// "model.vision_tower.*", "model.multi_modal_projector.*" in memory. All load, to the same model.
TEST(LlavaLoad, AllCheckpointWeightLayouts) {
  const std::string src = kDir + "/llava_small";
  const auto modern = LlavaModel::load(src);
  auto ref = SafetensorsFile::open(src + "/reference.safetensors");
  const int64_t n = 16 * modern->config().text.hidden_size;
  std::vector<float> want(static_cast<size_t>(n));
  modern->encode_images(floats(*ref, "p0.pixels"), 1, want.data());
  auto file = SafetensorsFile::open(src + "/model.safetensors");
  auto replace = [](std::string s, const std::string& from, const std::string& to) {
    return s.rfind(from, 0) == 0 ? to + s.substr(from.size()) : s;
  };
  using Renames = std::vector<std::pair<std::string, std::string>>;
  const Renames released = {{"vision_tower.", "vision_tower.vision_model."}};
  const Renames in_memory = {{"language_model.model.", "model.language_model."},
                             {"language_model.lm_head.", "lm_head."},
                             {"vision_tower.", "model.vision_tower."},
                             {"multi_modal_projector.", "model.multi_modal_projector."}};
  const auto dst = std::filesystem::temp_directory_path() / "vlm_llava_layouts";
  for (const Renames& renames : {released, in_memory}) {
    std::filesystem::create_directories(dst);
    std::filesystem::copy_file(src + "/config.json", dst / "config.json",
                               std::filesystem::copy_options::overwrite_existing);
    std::map<std::string, TensorView> renamed;
    for (const auto& [name, view] : file->tensors()) {
      std::string r = name;
      for (const auto& [from, to] : renames) r = replace(r, from, to);
      renamed[r] = view;
    }
    write_safetensors((dst / "model.safetensors").string(), renamed);
    const auto other = LlavaModel::load(dst.string());
    std::vector<float> got(static_cast<size_t>(n));
    other->encode_images(floats(*ref, "p0.pixels"), 1, got.data());
    EXPECT_EQ(got, want);
    std::filesystem::remove_all(dst);
  }
  std::filesystem::create_directories(dst);
  std::filesystem::copy_file(src + "/config.json", dst / "config.json");
  write_safetensors((dst / "model.safetensors").string(), {});
  EXPECT_THROW(LlavaModel::load(dst.string()), LoadError);
  std::filesystem::remove_all(dst);
}

std::vector<int32_t> media_indices(const MultimodalPrompt& p) {
  std::vector<int32_t> out;
  for (const ModalityTag& t : p.modalities) out.push_back(t.media_index);
  return out;
}

TEST(MultimodalInput, ExpandsSinglePlaceholdersAndTagsTokens) {
  const std::vector<int32_t> collapsed = {1, 5, 9, 6, 9, 7};
  const MultimodalPrompt p = expand_image_tokens(collapsed, 9, 3, 2);
  EXPECT_EQ(p.token_ids, (std::vector<int32_t>{1, 5, 9, 9, 9, 6, 9, 9, 9, 7}));
  EXPECT_EQ(media_indices(p), (std::vector<int32_t>{-1, -1, 0, 0, 0, -1, 1, 1, 1, -1}));
  EXPECT_EQ(p.media_offset, (std::vector<int32_t>{-1, -1, 0, 1, 2, -1, 0, 1, 2, -1}));
  EXPECT_EQ(p.modalities[3], (ModalityTag{Modality::Image, 0}));
  EXPECT_EQ(p.modalities[5], ModalityTag{});
  // The expanded form is kept as is; adjacent images split by count.
  const MultimodalPrompt q = expand_image_tokens(std::vector<int32_t>{1, 9, 9, 9, 9, 9, 9, 2}, 9, 3, 2);
  EXPECT_EQ(media_indices(q), (std::vector<int32_t>{-1, 0, 0, 0, 1, 1, 1, -1}));
  EXPECT_THROW(expand_image_tokens(collapsed, 9, 3, 3), RequestError);
  EXPECT_THROW(expand_image_tokens(std::vector<int32_t>{9, 9, 1, 9, 9, 9, 9}, 9, 3, 2), RequestError);

  std::vector<float> e0 = {1, 2, 3, 4, 5, 6}, e1 = {7, 8, 9, 10, 11, 12};  // [3, C=2] each
  const std::vector<const float*> media = {e0.data(), e1.data()};
  std::vector<float> out(8, -1);
  std::vector<uint8_t> use(4);
  gather_media_embeddings(p, 4, 4, media, 2, out.data(), use.data());  // rows 4..7
  EXPECT_EQ(use, (std::vector<uint8_t>{1, 0, 1, 1}));
  EXPECT_EQ(out[0], 5);
  EXPECT_EQ(out[1], 6);
  EXPECT_EQ(out[4], 7);
  EXPECT_EQ(out[7], 10);
}

}  // namespace
}  // namespace vlm

// cuda_model_support (engine/backends/cuda_model_support.h): the GPU kernels' shape limits checked
// on the host at load, on the fixtures' configs with edited fields (no GPU needed: CI runs these),
// and make_step_backend refusing --device cuda with the message before any GPU is opened.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/backends/cuda_model_support.h"
#include "engine/backends/make_step_backend.h"
#include "kernels/core/check.h"
#include "model/decoder/llm_decoder.h"
#include "model/families/qwen2_vl.h"
#include "tests/engine/engine_test_util.h"

namespace vlm::testing {
namespace {

std::string joined(const std::vector<std::string>& p) {
  std::string s;
  for (const auto& x : p) s += x + "\n";
  return s;
}

bool mentions(const std::vector<std::string>& p, const std::string& what) {
  return joined(p).find(what) != std::string::npos;
}

// The Qwen2-VL-7B text shapes (H 28, Hkv 4, D 128) on the tiny fixture's config.
ModelConfig qwen2vl_7b_shaped() {
  ModelConfig m = ModelConfig::load(fixture_model_dir("qwen2_tiny"));
  m.num_heads = 28;
  m.num_kv_heads = 4;
  m.head_dim = 128;
  m.hidden_size = 3584;
  return m;
}

EngineConfig all_methods() {
  EngineConfig c;
  c.sparse_prefill.method = SparsePrefillMethod::MMInference;
  c.sink_router = true;
  c.look_m.enabled = true;
  return c;
}

TEST(CudaModelSupport, SevenBShapesRunEveryMethod) {
  const ModelConfig m = qwen2vl_7b_shaped();
  EXPECT_TRUE(cuda_model_support(m, all_methods(), DType::BF16, 32768, /*vision_head_dim=*/80).empty())
      << joined(cuda_model_support(m, all_methods(), DType::BF16, 32768, 80));
  // head size 64 (Llama-3.2-1B) too
  ModelConfig l = m;
  l.num_heads = 32;
  l.num_kv_heads = 8;
  l.head_dim = 64;
  EXPECT_TRUE(cuda_model_support(l, all_methods(), DType::F16, 131072).empty());
}

TEST(CudaModelSupport, HeadSizeTwelveIsRefusedNamingIt) {
  ModelConfig m = ModelConfig::load(fixture_model_dir("llama_tiny"));
  m.head_dim = 12;
  const auto p = cuda_model_support(m, EngineConfig{}, DType::BF16, 512);
  ASSERT_FALSE(p.empty());
  EXPECT_TRUE(mentions(p, "head size 12: the GPU's KV cache write needs a multiple of 8")) << joined(p);
  EXPECT_NE(cuda_support_message(p).find("--device cuda cannot run this model"), std::string::npos);
}

TEST(CudaModelSupport, HeadSizeAbove256IsRefused) {
  ModelConfig m = qwen2vl_7b_shaped();
  m.head_dim = 264;
  EXPECT_TRUE(mentions(cuda_model_support(m, EngineConfig{}, DType::BF16, 4096), "head size 264: the GPU's kernels "
                                                                                "take at most 256"));
}

TEST(CudaModelSupport, ReferenceKernelHeadSizesNeedAShortContext) {
  // The Qwen2-VL server fixture: head size 16 (the reference kernel), 32768 positions.
  const Qwen2VLConfig q = Qwen2VLConfig::load(std::string(VLM_FIXTURES_DIR) + "/qwen2vl_server/qwen2_vl_chat");
  ASSERT_EQ(q.text.head_dim, 16);
  const auto p = cuda_model_support(q.text, EngineConfig{}, DType::BF16, 32768, q.vision.head_dim());
  ASSERT_EQ(p.size(), 1u) << joined(p);
  EXPECT_TRUE(mentions(p, "at most 12000 tokens of context, and max_model_len is 32768: pass --max-model-len 12000"))
      << joined(p);
  EXPECT_TRUE(cuda_model_support(q.text, EngineConfig{}, DType::BF16, 12000, q.vision.head_dim()).empty());
}

TEST(CudaModelSupport, MethodsByFlagOnShapesTheGpuCannotRunAreRefused) {
  const ModelConfig tiny = ModelConfig::load(fixture_model_dir("llama_tiny"));  // D 16, G 2
  EngineConfig c = all_methods();
  auto p = cuda_model_support(tiny, c, DType::BF16, 512);
  EXPECT_TRUE(mentions(p, "--sparse-prefill mminference: the GPU's block-sparse kernel takes head size 64 or 128, "
                          "not 16"))
      << joined(p);
  EXPECT_TRUE(mentions(p, "--sink-router on: the GPU routes on its decode kernel")) << joined(p);
  EXPECT_FALSE(mentions(p, "--look-m")) << "LOOK-M runs D 16, G 2 on the GPU:\n" << joined(p);

  // G 32 (64 query heads over 2 KV heads): past the decode kernel's 16 and LOOK-M's scores.
  ModelConfig wide = qwen2vl_7b_shaped();
  wide.num_heads = 64;
  wide.num_kv_heads = 2;
  p = cuda_model_support(wide, c, DType::BF16, 4096);
  EXPECT_TRUE(mentions(p, "not head size 128 with 32 per KV head")) << joined(p);
  EXPECT_TRUE(mentions(p, "--look-m: the GPU's LOOK-M scores take at most 16 query heads per KV head")) << joined(p);
  EXPECT_FALSE(mentions(p, "--sparse-prefill")) << joined(p);

  // Sparse prefill needs a bf16/f16 cache, and a method the GPU plans (64-token blocks).
  c = EngineConfig{};
  c.sparse_prefill.method = SparsePrefillMethod::MMInference;
  p = cuda_model_support(qwen2vl_7b_shaped(), c, DType::F32, 4096);
  EXPECT_TRUE(mentions(p, "needs a bf16/f16 cache, not --dtype float32")) << joined(p);
  c.sparse_prefill.block = 32;
  p = cuda_model_support(qwen2vl_7b_shaped(), c, DType::BF16, 4096);
  EXPECT_TRUE(mentions(p, "over 64-token blocks")) << joined(p);
  // Off by flag: nothing to refuse (requests asking for it get a 400: StepBackend::runs_sparse_prefill).
  EXPECT_TRUE(cuda_model_support(tiny, EngineConfig{}, DType::BF16, 512).empty());
}

TEST(CudaModelSupport, GroupAndBlockShapes) {
  ModelConfig m = qwen2vl_7b_shaped();
  m.num_kv_heads = 5;  // 28 over 5
  auto p = cuda_model_support(m, EngineConfig{}, DType::BF16, 4096);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(mentions(p, "28 query heads over 5 KV heads")) << joined(p);
  EngineConfig c;
  c.block_size = 24;
  p = cuda_model_support(qwen2vl_7b_shaped(), c, DType::BF16, 4096);
  EXPECT_TRUE(mentions(p, "--block-size 24: the GPU's attention kernels need a power of two")) << joined(p);
}

TEST(CudaModelSupport, VisionOffTensorCoresBoundsTheMediaPatches) {
  const ModelConfig m = qwen2vl_7b_shaped();
  EngineConfig c;
  c.max_media_patches = 65536;
  // Qwen2-VL's tower (head size 80) in bf16 runs on tensor cores: any segment length.
  EXPECT_TRUE(cuda_model_support(m, c, DType::BF16, 4096, 80).empty());
  // float32 (the exact path) runs the reference kernel: at most 40960 rows per image or frame.
  auto p = cuda_model_support(m, c, DType::F32, 4096, 80);
  EXPECT_TRUE(mentions(p, "pass --max-media-patches 40960")) << joined(p);
  p = cuda_model_support(m, c, DType::BF16, 4096, 12);  // head size 12: off tensor cores too
  EXPECT_TRUE(mentions(p, "head size 12")) << joined(p);
  c.max_media_patches = 32768;  // the default
  EXPECT_TRUE(cuda_model_support(m, c, DType::F32, 4096, 12).empty());
}

TEST(CudaModelSupport, DeviceCudaIsRefusedBeforeAnyGpuIsOpened) {
  // On CI (no GPU, maybe no CUDA build) the shape message comes first, not "no GPU".
  auto model = TextModel::load(fixture_model_dir("llama_tiny"));
  EngineConfig c = test_config();
  c.device = Device::Cuda;
  c.sink_router = true;  // D 16: the GPU cannot route it
  try {
    make_step_backend(c, *model, {}, 512);
    FAIL() << "--device cuda with --sink-router on at head size 16 must be refused";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("--device cuda cannot run this model as configured: --sink-router on"),
              std::string::npos)
        << e.what();
  }
}

// --tensor-parallel-size N > 1 runs on GPUs only: the CPU refuses it by name (its tensor
// parallelism, CpuTensorParallelDecoder, is the tests' reference).
TEST(CudaModelSupport, TensorParallelOnTheCpuIsRefused) {
  auto model = TextModel::load(fixture_model_dir("llama_tiny"));
  EngineConfig c = test_config();
  c.device = Device::Cpu;
  c.tensor_parallel_size = 2;
  try {
    make_step_backend(c, *model, {}, 512);
    FAIL() << "--tensor-parallel-size 2 with --device cpu must be refused";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("--tensor-parallel-size 2 runs on GPUs (--device cuda; here: --device cpu)"),
              std::string::npos)
        << e.what();
  }
  c.tensor_parallel_size = 1;  // the default builds
  EXPECT_NE(make_step_backend(c, *model, {}, 512), nullptr);
}

// --mm-encoder-devices above --tensor-parallel-size is refused by name, before any device check.
TEST(CudaModelSupport, MoreMediaEncoderDevicesThanRanksAreRefused) {
  auto model = TextModel::load(fixture_model_dir("llama_tiny"));
  EngineConfig c = test_config();
  c.device = Device::Cpu;  // the flag's range is checked first, on any device
  c.tensor_parallel_size = 2;
  c.mm_encoder_devices = 3;
  try {
    make_step_backend(c, *model, {}, 512);
    FAIL() << "--mm-encoder-devices 3 over 2 ranks must be refused";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("--mm-encoder-devices 3: between 0 (every rank's GPU) and "
                                         "--tensor-parallel-size 2"),
              std::string::npos)
        << e.what();
  }
}

// The data-parallel encoder under tensor parallelism is the default (--mm-encoder-devices 0, vLLM's
// --mm-encoder-tp-mode data) and every value in 0..N passes the flag's checks: the first refusal
// is the device's (--device cpu), not the flag's.
TEST(CudaModelSupport, DataParallelMediaEncoderUnderTensorParallelIsTheDefault) {
  EXPECT_EQ(EngineConfig{}.mm_encoder_devices, 0);
  auto model = TextModel::load(fixture_model_dir("llama_tiny"));
  EngineConfig c = test_config();
  c.device = Device::Cpu;
  c.tensor_parallel_size = 2;
  for (int m : {0, 1, 2}) {
    c.mm_encoder_devices = m;
    try {
      make_step_backend(c, *model, {}, 512);
      FAIL() << "--tensor-parallel-size 2 on the CPU must be refused";
    } catch (const LoadError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.find("--mm-encoder-devices"), std::string::npos) << "m " << m << ": " << what;
      EXPECT_NE(what.find("--tensor-parallel-size 2 runs on GPUs"), std::string::npos) << "m " << m << ": " << what;
    }
  }
}

// LOOK-M under tensor parallelism: each rank selects and compacts its own KV heads, so a model
// whose KV heads would be replicated (1 KV head over 2 ranks) is refused by name, on any device;
// one whose KV heads split (2 over 2) passes that check (and meets the CPU's refusal of TP).
TEST(CudaModelSupport, LookMUnderTensorParallelNeedsSplitKvHeads) {
  EngineConfig c = test_config();
  c.device = Device::Cpu;
  c.tensor_parallel_size = 2;
  c.look_m.enabled = true;
  auto one_kv_head = TextModel::load(fixture_model_dir("qwen3_f32"));
  try {
    make_step_backend(c, *one_kv_head, {}, 512);
    FAIL() << "LOOK-M with 1 KV head over 2 ranks must be refused";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("--tensor-parallel-size 2: LOOK-M needs the KV heads split over the ranks "
                                         "(the model's 1 KV head would be replicated)"),
              std::string::npos)
        << e.what();
  }
  auto two_kv_heads = TextModel::load(fixture_model_dir("llama_tiny"));
  try {
    make_step_backend(c, *two_kv_heads, {}, 512);
    FAIL() << "--tensor-parallel-size 2 with --device cpu must be refused";
  } catch (const LoadError& e) {
    EXPECT_EQ(std::string(e.what()).find("LOOK-M"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("runs on GPUs"), std::string::npos) << e.what();
  }
}

// SinkRouter under tensor parallelism routes each rank's whole KV groups: replicated KV heads (1 KV
// head over 2 ranks: a group's query heads on both) are refused by name, before any device check;
// with the KV heads split (2 over 2) the flag passes that check (the CPU device is refused next).
TEST(CudaModelSupport, SinkRouterOverReplicatedKvHeadsIsRefused) {
  auto replicated = TextModel::load(fixture_model_dir("qwen3_f32"));  // 4 query heads, 1 KV head
  EngineConfig c = test_config();
  c.device = Device::Cpu;
  c.tensor_parallel_size = 2;
  c.sink_router = true;
  try {
    make_step_backend(c, *replicated, {}, 512);
    FAIL() << "SinkRouter over a replicated KV head must be refused";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("--tensor-parallel-size 2: SinkRouter needs the KV heads split over the "
                                         "ranks, but 1 KV head is replicated"),
              std::string::npos)
        << e.what();
  }
  auto split = TextModel::load(fixture_model_dir("llama_tiny"));  // 4 query heads, 2 KV heads
  try {
    make_step_backend(c, *split, {}, 512);
    FAIL() << "--tensor-parallel-size 2 with --device cpu must be refused";
  } catch (const LoadError& e) {
    EXPECT_EQ(std::string(e.what()).find("SinkRouter"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("runs on GPUs"), std::string::npos) << e.what();
  }
}

// --quantization fp8 runs on the GPU only: the CPU refuses it by name.
TEST(CudaModelSupport, QuantizationFp8OnTheCpuIsRefused) {
  auto model = TextModel::load(fixture_model_dir("llama_tiny"));
  EngineConfig c = test_config();
  c.device = Device::Cpu;
  c.quantize_fp8 = true;
  try {
    make_step_backend(c, *model, {}, 512);
    FAIL() << "--quantization fp8 with --device cpu must be refused";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("--quantization fp8 runs on the GPU (--device cuda; here: --device cpu)"),
              std::string::npos)
        << e.what();
  }
  c.quantize_fp8 = false;
  EXPECT_EQ(make_step_backend(c, *model, {}, 512)->device().rfind("cpu", 0), 0u);
}

// --kv-cache-dtype fp8 (the GPU's FP8 cache): refused on the CPU, and on the GPU together with the
// f32 exact path or with the one method that does not read FP8 yet (XAttention heads), each named.
TEST(CudaModelSupport, KvCacheFp8OnTheCpuIsRefused) {
  auto model = TextModel::load(fixture_model_dir("llama_tiny"));
  EngineConfig c = test_config();
  c.device = Device::Cpu;
  c.kv_dtype = DType::F8_E4M3;
  try {
    make_step_backend(c, *model, {}, 512);
    FAIL() << "--kv-cache-dtype fp8 with --device cpu must be refused";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-cache-dtype fp8 runs on the GPU (--device cuda; here: --device cpu)"),
              std::string::npos)
        << e.what();
  }
}

TEST(CudaModelSupport, KvCacheFp8WithMethodsOrF32IsRefusedNamingThem) {
  const ModelConfig m = qwen2vl_7b_shaped();
  EngineConfig dense;
  dense.kv_dtype = DType::F8_E4M3;
  EXPECT_TRUE(cuda_model_support(m, dense, DType::BF16, 32768).empty())
      << joined(cuda_model_support(m, dense, DType::BF16, 32768));
  EXPECT_TRUE(mentions(cuda_model_support(m, dense, DType::F32, 32768), "--kv-cache-dtype fp8 with --dtype float32"));
  EngineConfig c = all_methods();  // MMInference (grid heads), SinkRouter, LOOK-M: all read FP8
  c.kv_dtype = DType::F8_E4M3;
  EXPECT_TRUE(cuda_model_support(m, c, DType::BF16, 32768).empty()) << joined(cuda_model_support(m, c, DType::BF16, 32768));
  for (const auto method : {SparsePrefillMethod::AShape, SparsePrefillMethod::TriShape, SparsePrefillMethod::VerticalSlash,
                            SparsePrefillMethod::Grid}) {
    c.sparse_prefill.method = method;
    EXPECT_TRUE(cuda_model_support(m, c, DType::BF16, 32768).empty()) << sparse_prefill_method_name(method);
  }
  // XAttention heads: by method, and as MMInference's default head or one head pattern.
  c.sparse_prefill.method = SparsePrefillMethod::XAttention;
  auto p = cuda_model_support(m, c, DType::BF16, 32768);
  EXPECT_EQ(p.size(), 1u) << joined(p);
  EXPECT_TRUE(mentions(p, "--sparse-prefill xattention with --kv-cache-dtype fp8")) << joined(p);
  c.sparse_prefill.method = SparsePrefillMethod::MMInference;
  c.sparse_prefill.default_head.type = HeadPatternType::XAttention;
  EXPECT_TRUE(mentions(cuda_model_support(m, c, DType::BF16, 32768), "--sparse-prefill mminference with --kv-cache-dtype fp8"));
  c.sparse_prefill.default_head = HeadPattern{};
  auto pats = std::make_shared<SparseHeadPatterns>();
  pats->layers.resize(2);
  pats->layers[1].resize(3);
  pats->layers[1][2].type = HeadPatternType::XAttention;
  c.sparse_prefill.head_patterns = pats;
  EXPECT_TRUE(uses_xattention_heads(c.sparse_prefill));
  p = cuda_model_support(m, c, DType::BF16, 32768);
  EXPECT_EQ(p.size(), 1u) << joined(p);
  // The same configuration over a bf16 cache runs.
  c.kv_dtype = DType::BF16;
  EXPECT_TRUE(cuda_model_support(m, c, DType::BF16, 32768).empty()) << joined(cuda_model_support(m, c, DType::BF16, 32768));
}

TEST(CudaModelSupport, DeviceAutoFallsBackToTheCpu) {
  // --device auto takes the CPU instead (with a warning) where the GPU cannot run the model.
  if (!cuda_available()) GTEST_SKIP() << "no GPU: auto is the CPU anyway";
  auto model = TextModel::load(fixture_model_dir("llama_tiny"));
  EngineConfig c = test_config();
  c.device = Device::Auto;
  c.sink_router = true;
  EXPECT_EQ(make_step_backend(c, *model, {}, 512)->device().rfind("cpu", 0), 0u);
}

// Qwen3's per-head q/k RMSNorm and Qwen3-VL's interleaved M-RoPE run on the GPU (CudaLayers'
// head_rms_norm, rope_table's MropeAxes): Qwen3-8B's shapes (H 32, Hkv 8, D 128) pass the checks.
TEST(CudaModelSupport, Qwen3QkNormAndInterleavedMropeAreTaken) {
  ModelConfig m = qwen2vl_7b_shaped();
  m.architecture = "Qwen3ForCausalLM";
  m.family = DecoderFamily::Qwen3;
  m.num_heads = 32;
  m.num_kv_heads = 8;
  m.qk_norm = true;
  EXPECT_TRUE(cuda_model_support(m, EngineConfig{}, DType::BF16, 4096).empty());
  m.rope.mrope_section = {24, 20, 20};
  m.rope.mrope_interleaved = true;
  EXPECT_TRUE(cuda_model_support(m, EngineConfig{}, DType::BF16, 4096).empty());
}

// Mixture-of-experts layers (Qwen3-MoE, Qwen3-VL-MoE's decoder) run on the GPU (CudaLayers::moe)
// up to the routing kernels' limits: Qwen3-30B-A3B's 128 experts, top 8, pass; more experts or a
// wider top-k than the kernels hold are refused at load, naming the limit.
TEST(CudaModelSupport, MixtureOfExpertsRunsWithinTheRoutingLimits) {
  ModelConfig m = qwen2vl_7b_shaped();
  m.architecture = "Qwen3MoeForCausalLM";
  m.moe.num_experts = 128;
  m.moe.top_k = 8;
  m.moe.intermediate_size = 768;
  EXPECT_TRUE(cuda_model_support(m, EngineConfig{}, DType::BF16, 4096).empty());
  m.moe.num_experts = 2048;
  auto p = cuda_model_support(m, EngineConfig{}, DType::BF16, 4096);
  ASSERT_EQ(p.size(), 1u) << joined(p);
  EXPECT_TRUE(mentions(p, "Qwen3MoeForCausalLM's mixture-of-experts layers (2048 experts, top 8): the GPU routes at "
                          "most 1024 experts, top 32"))
      << joined(p);
  m.moe.num_experts = 128;
  m.moe.top_k = 64;
  p = cuda_model_support(m, EngineConfig{}, DType::BF16, 4096);
  ASSERT_EQ(p.size(), 1u) << joined(p);
  EXPECT_TRUE(mentions(p, "(128 experts, top 64)")) << joined(p);
}

// Qwen3-VL's DeepStack (vision planes added after the first decoder layers) runs on the GPU
// (CudaRowOps::add_override_plane): no refusal.
TEST(CudaModelSupport, DeepStackPassesTheGpuChecks) {
  ModelConfig m = qwen2vl_7b_shaped();
  m.deepstack_layers = 3;
  const auto p = cuda_model_support(m, EngineConfig{}, DType::BF16, 4096);
  EXPECT_TRUE(p.empty()) << joined(p);
}

// The Qwen3 fixture checkpoint passes the GPU's checks (test_cuda runs it against HF).
TEST(CudaModelSupport, Qwen3CheckpointPassesTheGpuChecks) {
  if (!std::filesystem::exists(fixture_model_dir("qwen3_tiny") + "/config.json"))
    GTEST_SKIP() << "fixture tests/fixtures/models/qwen3_tiny not generated yet: run "
                    "tools/fixtures/run_qwen3_fixtures.sh on the GPU machine";
  auto decoder = LlmDecoder::load(fixture_model_dir("qwen3_tiny"));
  ASSERT_TRUE(decoder->config().qk_norm);
  const auto p = cuda_model_support(decoder->config(), test_config(), DType::BF16, 512);
  EXPECT_TRUE(p.empty()) << joined(p);
}

}  // namespace
}  // namespace vlm::testing

// kv_cache_scales (model/decoder/kv_cache_scales.h): the FP8 KV cache's static per-layer, per-head
// scales read from a checkpoint's k_scale/v_scale (a scalar, or one per KV head), 1.0 for layers
// without them, and the malformed cases refused naming the tensor.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "kernels/core/check.h"
#include "model/decoder/kv_cache_scales.h"
#include "model/decoder/safetensors.h"
#include "model/decoder/weights.h"

namespace vlm {
namespace {

namespace fs = std::filesystem;

class KvCacheScalesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("vlm_kv_scales_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Writes the tensors as the checkpoint and opens it.
  WeightStore write(const std::map<std::string, TensorView>& t) {
    write_safetensors((dir_ / "model.safetensors").string(), t);
    return WeightStore::open(dir_.string());
  }
  fs::path dir_;
};

TEST_F(KvCacheScalesTest, ScalarAndPerHeadScalesAndDefaults) {
  float k0 = 0.5f, v0 = 0.25f;                  // layer 0: scalars [] / [1]
  std::vector<float> k2 = {1, 2, 3}, v2 = {4, 5, 6};  // layer 2: per head [3]
  float w = 7.f;
  const WeightStore ws = write({{"model.layers.0.self_attn.k_scale", TensorView(&k0, DType::F32, Shape{})},
                                {"model.layers.0.self_attn.v_scale", TensorView(&v0, DType::F32, Shape{1})},
                                {"model.layers.2.self_attn.k_scale", TensorView(k2.data(), DType::F32, Shape{3})},
                                {"model.layers.2.self_attn.v_scale", TensorView(v2.data(), DType::F32, Shape{3})},
                                {"model.norm.weight", TensorView(&w, DType::F32, Shape{1})}});
  const KvCacheScales s = kv_cache_scales(ws, "model.", 3, 3);
  EXPECT_EQ(s.layers_from_checkpoint, 2);
  EXPECT_EQ(s.k, (std::vector<float>{0.5f, 0.5f, 0.5f, 1, 1, 1, 1, 2, 3}));
  EXPECT_EQ(s.v, (std::vector<float>{0.25f, 0.25f, 0.25f, 1, 1, 1, 4, 5, 6}));
  // Another prefix finds none: every scale 1.0 (vLLM's default without calibration).
  const KvCacheScales none = kv_cache_scales(ws, "language_model.model.", 3, 3);
  EXPECT_EQ(none.layers_from_checkpoint, 0);
  EXPECT_EQ(none.k, std::vector<float>(9, 1.0f));
  EXPECT_EQ(none.v, std::vector<float>(9, 1.0f));
}

TEST_F(KvCacheScalesTest, MalformedScalesAreRefusedNamingTheTensor) {
  float k = 0.5f, bad = -1.f;
  std::vector<float> two = {1, 2};
  auto refused = [&](const std::map<std::string, TensorView>& t, const std::string& what) {
    const WeightStore ws = write(t);
    try {
      kv_cache_scales(ws, "model.", 1, 3);
      ADD_FAILURE() << "expected a LoadError mentioning " << what;
    } catch (const LoadError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refused({{"model.layers.0.self_attn.k_scale", TensorView(&k, DType::F32, Shape{})}},
          "has model.layers.0.self_attn.k_scale but not model.layers.0.self_attn.v_scale");
  refused({{"model.layers.0.self_attn.k_scale", TensorView(two.data(), DType::F32, Shape{2})},
           {"model.layers.0.self_attn.v_scale", TensorView(&k, DType::F32, Shape{})}},
          "model.layers.0.self_attn.k_scale: 2 values, expected a scalar or one per KV head (3)");
  refused({{"model.layers.0.self_attn.k_scale", TensorView(&k, DType::F32, Shape{})},
           {"model.layers.0.self_attn.v_scale", TensorView(&bad, DType::F32, Shape{})}},
          "model.layers.0.self_attn.v_scale: value -1");
}

}  // namespace
}  // namespace vlm

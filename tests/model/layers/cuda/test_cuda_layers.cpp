// The GPU's layers (model/layers/cuda) against the CPU's (the exact reference) on a random Qwen2
// checkpoint: layer 0's q|k|v projection with its RMSNorm (the norm before the GEMM, and folded
// into the GEMV), the o projection's residual add with a bias-free f32 output, the gated MLP with
// its norm (GEMM and GEMV paths), and the LM head over logit rows after the final norm. In f32
// (the GEMM path) within 1e-5 relative; in bf16 (the GEMV and fused paths for 3 rows) within the
// bf16 rounding of inputs and weights (2e-2 relative). Skips without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <vector>

#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/device_upload.h"
#include "model/arch/llama_decoder.h"
#include "model/layers/cpu/cpu_layers.h"
#include "model/layers/cpu/cpu_step.h"
#include "model/layers/cuda/cuda_layers.h"
#include "model/layers/cuda/cuda_step.h"
#include "tests/support/gpu_test.h"
#include "tests/support/random_qwen2.h"

namespace vlm::testing {
namespace {

double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// f32 host rows -> device rows of dt.
cuda::DeviceBuffer to_device(const std::vector<float>& v, DType dt) {
  return cuda::upload_converted({cuda::f32_view(v)}, dt, nullptr);
}

std::vector<float> to_host(const void* p, int64_t n, DType dt) {
  std::vector<char> raw(static_cast<size_t>(n) * dtype_size(dt));
  VLM_CUDA_CHECK(cudaDeviceSynchronize());
  VLM_CUDA_CHECK(cudaMemcpy(raw.data(), p, raw.size(), cudaMemcpyDeviceToHost));
  std::vector<float> out(static_cast<size_t>(n));
  convert_to_f32(raw.data(), dt, out.data(), n);
  return out;
}

class CudaLayer : public ::testing::Test {
 protected:
  void SetUp() override {
    VLM_REQUIRE_GPU();
    dir_ = write_random_qwen2("vlm_cuda_layers", shape_);
    store_ = std::make_unique<WeightStore>(WeightStore::open(dir_));
    config_ = ModelConfig::load(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::vector<float> random_rows(int64_t n, uint32_t seed) const {
    std::vector<float> v(static_cast<size_t>(n));
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (float& x : v) x = d(rng);
    return v;
  }

  // Runs `cpu` and `gpu` (the same layer made by each backend) on x [T, C] and compares outputs.
  // run(step, x, y) does the layer's work for one backend.
  template <class CpuRun, class GpuRun>
  void compare(DType dt, int64_t T, int64_t C, int64_t N, bool fused, double tol, const std::vector<float>& y0,
               const CpuRun& cpu_run, const GpuRun& gpu_run, DType y_dt, const char* what, DType x_dt = DType::F32) {
    const std::vector<float> x = random_rows(T * C, 11);
    ForwardBatch b;
    b.token_ids.assign(static_cast<size_t>(T), 0);
    b.positions.assign(static_cast<size_t>(T), 0);
    b.slot_mapping.assign(static_cast<size_t>(T), 0);
    b.logits_indices = {0, static_cast<int32_t>(T - 1)};
    const ActivationPlan plan;
    std::vector<float> logits;
    const EmbeddingOverride none;
    CpuStep cs(plan, b, {}, none, logits);
    std::vector<float> want = y0;
    std::vector<float> xc = x;
    cpu_run(cs, Act{xc.data(), T, C, DType::F32}, Act{want.data(), static_cast<int64_t>(want.size()) / N, N, DType::F32});

    cudaStream_t stream = nullptr;
    VLM_CUDA_CHECK(cudaStreamCreate(&stream));
    cuda::CublasLtGemm gemm;
    int64_t epoch = 0;
    CudaScratch pool(&epoch);
    CudaStep gs;
    gs.stream = stream;
    gs.dt = dt;
    gs.T = T;
    gs.R = 2;
    const std::vector<int32_t> rows = b.logits_indices;
    cuda::DeviceBuffer d_rows;
    d_rows.resize(rows.size() * 4);
    VLM_CUDA_CHECK(cudaMemcpy(d_rows.get(), rows.data(), rows.size() * 4, cudaMemcpyHostToDevice));
    gs.rows = d_rows.as<int32_t>();
    gs.fused_norm = fused;
    gs.gemm = &gemm;
    gs.pool = &pool;
    cuda::DeviceBuffer dx = to_device(x, x_dt), dy = to_device(y0, y_dt);
    gpu_run(gs, Act{dx.get(), T, C, x_dt}, Act{dy.get(), static_cast<int64_t>(y0.size()) / N, N, y_dt});
    const std::vector<float> got = to_host(dy.get(), static_cast<int64_t>(y0.size()), y_dt);
    VLM_CUDA_CHECK(cudaStreamDestroy(stream));
    EXPECT_LE(rel_error(got, want), tol) << what << " dt " << dtype_name(dt) << (fused ? " fused" : "");
  }

  RandomQwen2 shape_{.hidden = 256, .intermediate = 384, .layers = 1, .heads = 4, .kv_heads = 2, .vocab = 320};
  std::string dir_;
  std::unique_ptr<WeightStore> store_;
  ModelConfig config_;
};

TEST_F(CudaLayer, LinearMlpAndHeadMatchTheCpuLayers) {
  const int64_t C = shape_.hidden, V = shape_.vocab;
  const int64_t QKV = (shape_.heads + 2 * shape_.kv_heads) * (C / shape_.heads);
  const LlamaLayerSpec spec = llama_layer_spec(config_, 0);
  const WeightSource w(*store_, "model.");
  const NormSpec final_norm{NormKind::Rms, static_cast<float>(config_.rms_norm_eps), {"norm.weight", {C}}, {}};
  CpuLayers cpu;
  for (DType dt : {DType::F32, DType::BF16}) {
    CudaLayers gpu(dt);
    const double tol = dt == DType::F32 ? 1e-5 : 2e-2;
    for (int64_t T : {3, 40}) {
      for (bool fused : {false, true}) {
        // q|k|v of the input norm (the CPU writes planes, the GPU rows: compare the GPU's rows
        // regrouped as planes).
        auto cq = cpu.linear(w, {spec.q, spec.k, spec.v}, &spec.input_norm);
        auto gq = gpu.linear(w, {spec.q, spec.k, spec.v}, &spec.input_norm);
        const std::vector<float> zeros(static_cast<size_t>(T * QKV), 0.0f);
        std::vector<float> planes;
        compare(dt, T, C, QKV, fused, tol, zeros,
                [&](Step& s, Act x, Act y) {
                  cq->forward(s, x, y, Accum::Write);
                  planes.assign(y.f32(), y.f32() + T * QKV);
                  // regroup the planes [T,QD] [T,KD] [T,KD] into rows [T, QD+2KD]
                  const int64_t QD = spec.q.weight.shape[0], KD = spec.k.weight.shape[0];
                  for (int64_t t = 0; t < T; ++t) {
                    std::copy(planes.begin() + t * QD, planes.begin() + (t + 1) * QD, y.f32() + t * QKV);
                    std::copy(planes.begin() + T * QD + t * KD, planes.begin() + T * QD + (t + 1) * KD,
                              y.f32() + t * QKV + QD);
                    std::copy(planes.begin() + T * (QD + KD) + t * KD, planes.begin() + T * (QD + KD) + (t + 1) * KD,
                              y.f32() + t * QKV + QD + KD);
                  }
                },
                [&](Step& s, Act x, Act y) { gq->forward(s, x, y, Accum::Write); }, dt, "qkv");
        // The o projection (input: attention rows in dt) added into an f32 residual.
        auto co = cpu.linear(w, {spec.o}, nullptr);
        auto go = gpu.linear(w, {spec.o}, nullptr);
        compare(dt, T, C, C, fused, tol, random_rows(T * C, 6),
                [&](Step& s, Act x, Act y) { co->forward(s, x, y, Accum::Add); },
                [&](Step& s, Act x, Act y) { go->forward(s, x, y, Accum::Add); }, DType::F32, "o", dt);
        // The MLP with the post-attention norm, added into an f32 residual.
        auto cm = cpu.mlp(w, spec.mlp);
        auto gm = gpu.mlp(w, spec.mlp);
        const std::vector<float> resid = random_rows(T * C, 5);
        std::vector<float> cin(static_cast<size_t>(T * cm->inner_cols()));
        cuda::DeviceBuffer gin;
        gin.resize(static_cast<size_t>(T * gm->inner_cols()) * dtype_size(dt));
        compare(dt, T, C, C, fused, tol, resid,
                [&](Step& s, Act x, Act y) { cm->forward(s, x, Act{cin.data(), T, cm->inner_cols(), DType::F32}, y, Accum::Add); },
                [&](Step& s, Act x, Act y) { gm->forward(s, x, Act{gin.get(), T, gm->inner_cols(), dt}, y, Accum::Add); },
                DType::F32, "mlp");
        // The LM head on logit rows 0 and T-1 after the final norm.
        // (the random checkpoint ties the head to the embedding table)
        const std::vector<LinearPart> head{{{"embed_tokens.weight", {V, C}}, {}}};
        auto ch = cpu.linear(w, head, &final_norm);
        auto gh = gpu.linear(w, head, &final_norm);
        const std::vector<float> head0(static_cast<size_t>(2 * V), 0.0f);
        compare(dt, T, C, V, fused, tol, head0, [&](Step& s, Act x, Act y) { ch->forward_rows(s, x, y); },
                [&](Step& s, Act x, Act y) { gh->forward_rows(s, x, y); }, DType::F32, "head rows");
      }
    }
  }
}

}  // namespace
}  // namespace vlm::testing

#include "model/layers/cuda/cuda_fp8_linear.h"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>

#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/device_upload.h"
#include "kernels/cuda/gemm/fp8_gemv.h"
#include "kernels/cuda/gemm/fp8_gemv_v2.h"
#include "kernels/cuda/gemm/fp8_quantize.h"
#include "kernels/cuda/gemm/fp8_tile_gemm.h"
#include "kernels/cuda/ops/ops_cuda.h"

namespace vlm {

namespace {

// Part p's bias rows [b, e) in f32 (empty when it has none).
std::vector<float> part_bias(const WeightSource& src, const LinearPart& p, int64_t rows, int64_t b, int64_t e) {
  if (p.bias.empty()) return {};
  const TensorView bias = src.get(p.bias, {rows});
  std::vector<float> out(static_cast<size_t>(e - b));
  convert_to_f32(static_cast<const char*>(bias.data) + b * static_cast<int64_t>(dtype_size(bias.dtype)), bias.dtype,
                 out.data(), e - b);
  return out;
}

// Quantizes rows [b, e) of one part into q/scale (rows of the layer starting at its offset).
void quantize_part(const WeightSource& src, const LinearPart& p, int64_t b, int64_t e, int64_t K, uint8_t* q,
                   float* scale) {
  const int64_t R = e - b;
  if (std::optional<Fp8Weight> f = src.fp8(p.weight)) {
    const int64_t N = f->q.dim(0);
    if (f->scales == Fp8Scales::Channel) {  // as stored
      VLM_CUDA_CHECK(cudaMemcpy(q, static_cast<const uint8_t*>(f->q.data) + b * K, static_cast<size_t>(R * K),
                                cudaMemcpyHostToDevice));
      VLM_CUDA_CHECK(cudaMemcpy(scale, f->scale.as<float>() + b, static_cast<size_t>(R) * 4, cudaMemcpyHostToDevice));
      return;
    }
    // Block scales: exact f32 values on the GPU, then one scale per row.
    cuda::DeviceBuffer raw = cuda::upload_converted({f->q}, DType::F8_E4M3, nullptr);
    cuda::DeviceBuffer bs = cuda::upload_converted({f->scale.view()}, DType::F32, nullptr);
    cuda::DeviceBuffer exact(static_cast<size_t>(N * K) * 4);
    cuda::dequantize_fp8_blocks(raw.as<uint8_t>(), bs.as<float>(), f->block_n, f->block_k, N, K, exact.as<float>(),
                                nullptr);
    cuda::quantize_fp8_rows(exact.as<float>() + b * K, DType::F32, R, K, q, scale, nullptr);
    VLM_CUDA_CHECK(cudaDeviceSynchronize());  // before the temporaries are freed
    return;
  }
  const TensorView rows = src.get_rows(p.weight, b, e);  // [R, K] (a dummy store makes only these)
  cuda::DeviceBuffer w = cuda::upload_converted({rows}, rows.dtype, nullptr);  // as stored (F32, BF16 or F16)
  cuda::quantize_fp8_rows(w.get(), rows.dtype, R, K, q, scale, nullptr);
  VLM_CUDA_CHECK(cudaDeviceSynchronize());
}

// x [M, K] BF16 quantized per token into the step's scratch: {xq [M, K] E4M3, xs [M] f32}.
std::pair<uint8_t*, float*> quantize_act(CudaStep& s, const void* x, int64_t M, int64_t K) {
  auto* xq = static_cast<uint8_t*>(s.scratch(CudaScratch::kFp8Act, M * K));  // [M, K] E4M3
  auto* xs = static_cast<float*>(s.scratch(CudaScratch::kFp8Scale, M * 4));  // [M] f32
  cuda::quantize_fp8_rows(x, s.dt, M, K, xq, xs, s.stream);
  return {xq, xs};
}

// fp8_gemv_v2.h's switches: VLM_FP8_GEMV_V2 / VLM_FP8_GEMV_NORM = 1 / 0, else the header's
// defaults (read once per process).
bool env_switch(const char* name, bool dflt) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == '\0') return dflt;
  return std::strcmp(e, "0") != 0;
}
bool gemv_v2_on() {
  static const bool on = env_switch("VLM_FP8_GEMV_V2", cuda::kFp8GemvV2Default);
  return on;
}
bool gemv_norm_on() {
  static const bool on = env_switch("VLM_FP8_GEMV_NORM", cuda::kFp8GemvNormDefault);
  return on;
}
// Whether a few-row step folds the RMS pre-norm into the FP8 GEMV (fp8_gemv_norm / _silu_mul_norm).
bool norm_folds(const CudaStep& s, const CudaPreNorm& pre, int64_t M, int64_t K) {
  return pre.rms && s.fused_norm && s.gemv && gemv_norm_on() && cuda::fp8_gemv_norm_supported(M, K, s.dt);
}

// Steps of 5..64 rows (decode batches, short prefill chunks) through fp8_tile_gemm; not under the
// old paths.
bool use_tile(const CudaStep& s, int64_t M, int64_t K) {
  return s.gemv && fp8_decode_paths() == Fp8DecodePaths::Tile && !cuda::fp8_gemv_supported(M, K, s.dt) &&
         cuda::fp8_tile_supported(M, K);
}

}  // namespace

Fp8DecodePaths fp8_decode_paths() {
  static const Fp8DecodePaths paths = [] {
    const char* e = std::getenv("VLM_FP8_DECODE");
    if (e && std::strcmp(e, "old") == 0) return Fp8DecodePaths::Old;
    return Fp8DecodePaths::Tile;
  }();
  return paths;
}

DeviceLinear upload_linear_fp8(const WeightSource& src, const std::vector<LinearPart>& parts, int64_t* bytes) {
  VLM_CHECK(!parts.empty(), "a linear layer without parts");
  struct Rows {
    int64_t n, b, e;
  };
  std::vector<Rows> rows;
  DeviceLinear d;
  for (const LinearPart& p : parts) {
    // The shape as stored (an FP8 weight's shape is its q's); dims beyond two are refused.
    std::optional<Fp8Weight> f = src.fp8(p.weight);
    const Shape sh = f ? f->q.shape : p.weight.shape;  // get() checks it against the stored shape
    VLM_CHECK(sh.ndim == 2, "FP8 linear {}{}: a weight of shape {} (FP8 layers are matrices)", src.prefix(),
              p.weight.name, sh.str());
    const int64_t N = sh[0], K = sh[1], b = p.row_begin, e = p.row_end < 0 ? N : p.row_end;
    VLM_CHECK(0 <= b && b < e && e <= N, "rows [{}, {}) of {} ({} rows)", b, e, p.weight.name, N);
    VLM_CHECK(d.K == 0 || d.K == K, "FP8 linear {}{}: parts of {} and {} columns", src.prefix(), p.weight.name, d.K, K);
    VLM_CHECK(K % 16 == 0, "FP8 linear {}{}: K = {} (FP8 GEMMs need K % 16 == 0)", src.prefix(), p.weight.name, K);
    d.K = K;
    d.N += e - b;
    rows.push_back({N, b, e});
  }
  const int64_t N = d.N, K = d.K;
  d.w8 = cuda::DeviceBuffer(static_cast<size_t>(N * K));
  d.w_scale = cuda::DeviceBuffer(static_cast<size_t>(N) * 4);
  std::vector<float> bias;
  size_t with_bias = 0;
  int64_t off = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    quantize_part(src, parts[i], rows[i].b, rows[i].e, K, d.w8.as<uint8_t>() + off * K, d.w_scale.as<float>() + off);
    const std::vector<float> pb = part_bias(src, parts[i], rows[i].n, rows[i].b, rows[i].e);
    with_bias += pb.empty() ? 0 : 1;
    bias.insert(bias.end(), pb.begin(), pb.end());
    off += rows[i].e - rows[i].b;
  }
  VLM_CHECK(with_bias == 0 || with_bias == parts.size(), "{}{}: a bias on some parts only", src.prefix(),
            parts.front().weight.name);
  if (!bias.empty()) {
    d.bias_dt = cuda::upload_converted({cuda::f32_view(bias)}, DType::BF16, bytes);
    d.bias_f32 = cuda::upload_converted({cuda::f32_view(bias)}, DType::F32, bytes);
  }
  if (bytes) *bytes += N * K + N * 4;
  return d;
}

void fp8_product(CudaStep& s, const DeviceLinear& d, const void* x, void* y, DType out_dt, bool accumulate, int64_t M) {
  VLM_CHECK(d.fp8() && s.dt == DType::BF16, "fp8_product: an FP8 layer on a {} step (FP8 layers compute in BF16)",
            dtype_name(s.dt));
  const int64_t N = d.N, K = d.K;
  if (M == 0) return;
  if (s.gemv && cuda::fp8_gemv_supported(M, K, s.dt)) {
    if (gemv_v2_on())
      cuda::fp8_gemv_v2(x, d.w8.as<uint8_t>(), d.w_scale.as<float>(), s.dt, d.bias(out_dt), y, out_dt, accumulate, M,
                        N, K, s.stream);
    else
      cuda::fp8_gemv(x, d.w8.as<uint8_t>(), d.w_scale.as<float>(), s.dt, d.bias(out_dt), y, out_dt, accumulate, M, N,
                     K, s.stream, cuda::Fp8GemvForm::Simple);
    return;
  }
  const auto [xq, xs] = quantize_act(s, x, M, K);
  if (use_tile(s, M, K)) {
    const int64_t pf = cuda::fp8_tile_partial_floats(M, N, K, false);
    auto* part = pf > 0 ? static_cast<float*>(s.scratch(CudaScratch::kFp8Out, pf * 4)) : nullptr;  // [S, M, N] f32
    cuda::fp8_tile_gemm(xq, xs, d.w8.as<uint8_t>(), d.w_scale.as<float>(), d.bias_dt.get(), y, out_dt, accumulate, M,
                        N, K, part, s.stream);
    return;
  }
  const float beta = accumulate ? 1.0f : 0.0f;
  if (s.gemm->linear_fp8(xq, xs, d.w8.get(), d.w_scale.as<float>(), d.bias_dt.get(), y, out_dt, beta, M, N, K, s.stream))
    return;
  // cuBLASLt took no F32 output with the bias / residual add and per-row scales: unfused.
  auto* tmp = static_cast<float*>(s.scratch(CudaScratch::kFp8Out, M * N * 4));  // [M, N] f32
  s.gemm->linear_fp8(xq, xs, d.w8.get(), d.w_scale.as<float>(), d.bias_dt.get(), y, out_dt, beta, M, N, K, s.stream,
                     tmp);
}

bool fp8_product_norm(CudaStep& s, const DeviceLinear& d, const CudaPreNorm& pre, const float* x, void* y,
                      DType out_dt, bool accumulate, int64_t M) {
  if (!d.fp8() || s.dt != DType::BF16 || M == 0 || !norm_folds(s, pre, M, d.K)) return false;
  cuda::fp8_gemv_norm(x, nullptr, pre.w.as<float>(), pre.eps, d.w8.as<uint8_t>(), d.w_scale.as<float>(), s.dt,
                      d.bias(out_dt), y, out_dt, accumulate, M, d.N, d.K, s.stream);
  return true;
}

void fp8_gated_mlp(CudaStep& s, const DeviceLinear& gate_up, const DeviceLinear& down, const CudaPreNorm* pre,
                   int64_t I, Act x, Act inner, void* act, Act y, bool accumulate) {
  const int64_t T = x.rows, C = gate_up.K;
  const DType dt = s.dt;
  const void* in = x.data;
  const bool folded = pre && T > 0 && norm_folds(s, *pre, T, C);  // norm, gate/up, SiLU·mul: one pass
  if (pre && !folded) {
    void* h = s.scratch(CudaScratch::kNormOut, T * C * static_cast<int64_t>(dtype_size(dt)));  // [T, C] dt
    pre->apply(x.f32(), T, C, h, dt, s.stream);
    s.mark("norm");
    in = h;
  }
  if (folded) {
    cuda::fp8_gemv_silu_mul_norm(x.f32(), nullptr, pre->w.as<float>(), pre->eps, gate_up.w8.as<uint8_t>(),
                                 gate_up.w_scale.as<float>(), dt, gate_up.bias(dt), act, T, I, C, s.stream);
  } else if (s.gemv && cuda::fp8_gemv_supported(T, C, dt) && gemv_v2_on()) {
    cuda::fp8_gemv_silu_mul_v2(in, gate_up.w8.as<uint8_t>(), gate_up.w_scale.as<float>(), dt, gate_up.bias(dt), act, T,
                               I, C, s.stream);
  } else if (s.gemv && cuda::fp8_gemv_supported(T, C, dt)) {
    cuda::fp8_gemv_silu_mul(in, gate_up.w8.as<uint8_t>(), gate_up.w_scale.as<float>(), dt, gate_up.bias(dt), act, T, I,
                            C, s.stream, cuda::Fp8GemvForm::Simple);
  } else if (use_tile(s, T, C)) {
    const auto [xq, xs] = quantize_act(s, in, T, C);
    const int64_t pf = cuda::fp8_tile_partial_floats(T, 2 * I, C, true);
    auto* part = pf > 0 ? static_cast<float*>(s.scratch(CudaScratch::kFp8Out, pf * 4)) : nullptr;  // [S, T, 2I] f32
    cuda::fp8_tile_gemm_silu_mul(xq, xs, gate_up.w8.as<uint8_t>(), gate_up.w_scale.as<float>(), gate_up.bias_dt.get(),
                                 act, T, I, C, part, s.stream);
  } else {
    fp8_product(s, gate_up, in, inner.data, dt, false, T);  // [T, 2I]
    s.mark("gemm_gate_up");
    cuda::silu_mul(inner.data, T, I, act, dt, s.stream);
  }
  s.mark("silu_mul");
  fp8_product(s, down, act, y.data, y.dtype, accumulate, T);
  s.mark("gemm_down");
}

void require_fp8_gpu(int device, const std::string& why) {
  cudaDeviceProp p{};
  VLM_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  if (p.major * 10 + p.minor < 89)
    throw LoadError(fmt::format("{}: GPU {} ({}, compute capability {}.{}) has no FP8 tensor cores (8.9+); serve it "
                                "without FP8",
                                why, device, p.name, p.major, p.minor));
  if (p.major != 9)
    throw LoadError(fmt::format("{}: GPU {} ({}, compute capability {}.{}): FP8 linear layers run on Hopper (sm_90) only "
                                "for now (cuBLASLt's per-channel FP8 scaling is SM90-only); serve it without FP8",
                                why, device, p.name, p.major, p.minor));
}

}  // namespace vlm

#include "model/layers/cuda/cuda_moe.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/device_upload.h"
#include "kernels/cuda/moe/moe_cuda.h"
#include "kernels/cuda/moe/moe_decode.h"
#include "model/layers/cuda/cuda_device_linear.h"
#include "model/layers/cuda/cuda_step.h"

namespace vlm {
namespace {

constexpr int64_t kAlign = 256;  // bytes; every region of the step's buffer starts aligned
constexpr int kRegions = 7;

int64_t align_up(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// The decode form of the grouped products: the tensor-core GEMV, or with VLM_MOE_GEMV=old the
// warp GEMV it replaced (kept so one GPU run measures both; read once per process).
bool old_gemv() {
  static const bool old = [] {
    const char* v = std::getenv("VLM_MOE_GEMV");
    return v != nullptr && std::string(v) == "old";
  }();
  return old;
}

// The decode forms of kernels/cuda/moe/moe_decode.h for a few tokens (the router GEMV, routing
// and sorting in one launch; the pair GEMVs with the combine folded into the staged down product,
// 3'.), or with VLM_MOE_DECODE=old the five launches they replace, or with VLM_MOE_DECODE=v1 the
// three launches with session 18's warp-per-output down product (3.), or with
// VLM_MOE_DECODE=staged the staged gate|up (2'., not measured yet) too (kept so one GPU run
// measures them all; read once per process).
const std::string& decode_env() {
  static const std::string v = [] {
    const char* e = std::getenv("VLM_MOE_DECODE");
    return std::string(e != nullptr ? e : "");
  }();
  return v;
}
bool old_decode() { return decode_env() == "old"; }
bool v1_down() { return decode_env() == "v1"; }
bool staged_gate_up() { return decode_env() == "staged"; }

// The RMS pre-norm folded into the fused router (moe_decode.h, 1n.): VLM_MOE_NORM_ROUTER=1 / 0,
// else kMoeNormRouterDefault (read once per process).
bool norm_router_on() {
  static const bool on = [] {
    const char* e = std::getenv("VLM_MOE_NORM_ROUTER");
    if (e == nullptr || *e == '\0') return cuda::kMoeNormRouterDefault;
    return std::string(e) != "0";
  }();
  return on;
}

// The one-token down+combine filled by bulk copies (moe_decode.h, 3b.): VLM_MOE_DOWN_BULK=1 / 0,
// else kMoeDownBulkDefault (read once per process); VLM_MOE_DECODE=v1 runs 3. regardless.
bool down_bulk_on() {
  static const bool on = [] {
    const char* e = std::getenv("VLM_MOE_DOWN_BULK");
    if (e == nullptr || *e == '\0') return cuda::kMoeDownBulkDefault;
    return std::string(e) != "0";
  }();
  return on;
}

// The pair path's router without the sort (moe_decode.h 1n., sorted.offsets null): on unless
// VLM_MOE_SKIP_SORT=0 (read once per process; the same choices and weights either way).
bool skip_sort_on() {
  static const bool on = [] {
    const char* e = std::getenv("VLM_MOE_SKIP_SORT");
    return e == nullptr || std::string(e) != "0";
  }();
  return on;
}

// Byte offsets of the step's buffers inside `inner` for T tokens (P = T*k pairs).
struct InnerLayout {
  int64_t logits = 0, expert = 0, weight = 0, pair_of_slot = 0, slot_of_pair = 0, act = 0, out = 0, total = 0;
  InnerLayout(int64_t T, int64_t E, int64_t K, int64_t I, int64_t C, int64_t esz) {
    const int64_t P = T * K;
    int64_t off = 0;
    auto take = [&off](int64_t bytes) {
      const int64_t at = off;
      off = align_up(off + bytes);
      return at;
    };
    logits = take(T * E * 4);      // [T, E] f32
    expert = take(P * 4);          // [T, K] i32
    weight = take(P * 4);          // [T, K] f32
    pair_of_slot = take(P * 4);    // [P] i32
    slot_of_pair = take(P * 4);    // [P] i32
    act = take(P * I * esz);       // [P, I] dt
    out = take(P * C * esz);       // [P, C] dt
    total = off;
  }
};

// src [E, R, Cc] (checkpoint dtype) -> [E, Cc, R] in dt on the device.
cuda::DeviceBuffer upload_transposed(const TensorView& src, DType dt, int64_t* bytes) {
  const int64_t E = src.dim(0), R = src.dim(1), Cc = src.dim(2);
  cuda::DeviceBuffer raw = cuda::upload_converted({src}, dt, nullptr);
  cuda::DeviceBuffer out(raw.bytes());
  cuda::moe_transpose_slices(raw.get(), out.get(), E, R, Cc, dt, nullptr);
  VLM_CUDA_CHECK(cudaDeviceSynchronize());
  if (bytes) *bytes += static_cast<int64_t>(out.bytes());
  return out;
}

class CudaMoe final : public Mlp {
 public:
  CudaMoe(const WeightSource& w, const MoeSpec& spec, DType dt, int64_t* bytes)
      : spec_(spec), dt_(dt), pre_(upload_pre_norm(w, spec.pre_norm ? &*spec.pre_norm : nullptr, bytes)) {
    const int64_t C = spec.hidden, I = spec.inner, E = spec.num_experts, K = spec.top_k;
    const std::string what = "mixture of experts " + w.prefix() + spec.router.name;
    if (C <= 0 || I <= 0 || E <= 0 || K < 1 || K > E)
      throw LoadError(what + ": C=" + std::to_string(C) + " I=" + std::to_string(I) + " E=" + std::to_string(E) +
                      " top_k=" + std::to_string(K));
    if (E > cuda::kMoeMaxExperts || K > cuda::kMoeMaxTopK)
      throw LoadError(what + ": " + std::to_string(E) + " experts, top " + std::to_string(K) + "; the GPU routes at most " +
                      std::to_string(cuda::kMoeMaxExperts) + " experts, top " + std::to_string(cuda::kMoeMaxTopK));
    if (!pre_ && dt != DType::F32)
      throw LoadError(what + ": a block without a pre-norm on a " + std::string(dtype_name(dt)) +
                      " GPU (its input must be converted; only f32 reads the residual directly)");
    router_ = upload_linear(w, {LinearPart{spec.router, {}}}, dt, true, bytes);
    const std::string& p = spec.experts;
    switch (spec.layout) {
      case ExpertLayout::PerExpert: {
        std::vector<TensorView> gu, dn;
        for (int64_t e = 0; e < E; ++e) {
          const std::string n = p + std::to_string(e) + ".";
          gu.push_back(w.get(n + "gate_proj.weight", Shape{I, C}));
          gu.push_back(w.get(n + "up_proj.weight", Shape{I, C}));
          dn.push_back(w.get(n + "down_proj.weight", Shape{C, I}));
        }
        gate_up_ = cuda::upload_converted(std::span<const TensorView>(gu), dt, bytes);
        down_ = cuda::upload_converted(std::span<const TensorView>(dn), dt, bytes);
        break;
      }
      case ExpertLayout::Fused:
        gate_up_ = cuda::upload_converted({w.get(p + "gate_up_proj", Shape{E, 2 * I, C})}, dt, bytes);
        down_ = cuda::upload_converted({w.get(p + "down_proj", Shape{E, C, I})}, dt, bytes);
        break;
      case ExpertLayout::FusedTransposed:
        gate_up_ = upload_transposed(w.get(p + "gate_up_proj", Shape{E, C, 2 * I}), dt, bytes);
        down_ = upload_transposed(w.get(p + "down_proj", Shape{E, I, C}), dt, bytes);
        break;
    }
    groups_.resize(static_cast<size_t>(3 * (E + 1) + 1) * 4);  // + moe_router_route_sort's counter, 0 between calls
    VLM_CUDA_CHECK(cudaMemset(groups_.get(), 0, groups_.bytes()));
    VLM_CUDA_CHECK(cudaDeviceSynchronize());
  }

  int64_t inner_cols() const override {
    const int64_t esz = static_cast<int64_t>(dtype_size(dt_));
    const int64_t per_token = InnerLayout(1, spec_.num_experts, spec_.top_k, spec_.inner, spec_.hidden, esz).total;
    // InnerLayout(T).total <= T * (per_token) for T >= 1: each region's padding is at most kAlign.
    return (per_token + kRegions * kAlign + esz - 1) / esz;
  }

  void forward(Step& st, Act x, Act inner, Act y, Accum a) const override {
    CudaStep& s = CudaStep::of(st);
    const int64_t T = x.rows, C = spec_.hidden, I = spec_.inner, E = spec_.num_experts, K = spec_.top_k, P = T * K;
    const DType dt = s.dt;
    const auto esz = static_cast<int64_t>(dtype_size(dt));
    const InnerLayout L(T, E, K, I, C, esz);
    VLM_CHECK(dt == dt_ && x.dtype == DType::F32 && x.cols == C && y.rows == T && y.cols == C && y.dtype == DType::F32 &&
                  inner.rows * inner.cols * static_cast<int64_t>(dtype_size(inner.dtype)) >= L.total,
              "mixture of experts {}: x [{}, {}], y [{}, {}], inner [{}, {}] ({} bytes needed), step {}, layer {}",
              spec_.router.name, x.rows, x.cols, y.rows, y.cols, inner.rows, inner.cols, L.total, dtype_name(dt),
              dtype_name(dt_));
    if (T == 0) return;
    // Decode forms (moe_decode.h): 16-bit, the router's weights in dt (not FP8), few tokens; 1n.
    // (the RMS pre-norm in the router's launch) when switched on and the shape fits.
    const bool norm_fusable = pre_ && pre_->rms && norm_router_on() && reinterpret_cast<uintptr_t>(x.data) % 16 == 0 &&
                              cuda::moe_norm_router_supported(T, E, C, K, dt);
    const cuda::MoeDecodePlan plan =
        cuda::moe_decode_plan(T, C, I, dt == DType::BF16 || dt == DType::F16,
                              router_.w.get() != nullptr && !router_.fp8(), old_decode(), norm_fusable);
    const void* h = x.data;  // [T, C] dt
    if (pre_) {
      void* n = s.scratch(CudaScratch::kNormOut, T * C * esz);
      if (!plan.norm_router) {
        pre_->apply(x.f32(), T, C, n, dt, s.stream);
        s.mark("norm");
      }
      h = n;
    }
    auto* base = static_cast<char*>(inner.data);
    auto* logits = reinterpret_cast<float*>(base + L.logits);
    auto* expert = reinterpret_cast<int32_t*>(base + L.expert);
    auto* weight = reinterpret_cast<float*>(base + L.weight);
    cuda::MoeSorted sorted;
    sorted.offsets = groups_.as<int32_t>();
    sorted.tile_starts = sorted.offsets + (E + 1);
    sorted.active = sorted.tile_starts + (E + 1);
    sorted.pair_of_slot = reinterpret_cast<int32_t*>(base + L.pair_of_slot);
    sorted.slot_of_pair = reinterpret_cast<int32_t*>(base + L.slot_of_pair);
    void* act = base + L.act;  // [P, I] dt
    void* out = base + L.out;  // [P, C] dt

    if (plan.norm_router) {  // h = the pre-norm of x, written by the same launch
      // The pair GEMVs read expert / weight only: no sort (moe_decode.h, sorted.offsets null).
      cuda::moe_norm_router_route_sort(x.f32(), pre_->w.as<float>(), pre_->eps, const_cast<void*>(h),
                                       router_.w.get(), dt, T, E, C, K, spec_.norm_topk_prob, logits, expert, weight,
                                       plan.pair_gemv && skip_sort_on() ? cuda::MoeSorted{} : sorted, counter(),
                                       s.stream);
      s.mark("moe_route");
    } else if (plan.fused_router) {
      cuda::moe_router_route_sort(h, router_.w.get(), dt, T, E, C, K, spec_.norm_topk_prob, logits, expert, weight,
                                  sorted, counter(), s.stream);
      s.mark("moe_route");
    } else {
      cuda_product(s, h, router_.w.get(), nullptr, logits, DType::F32, false, T, E, C);
      s.mark("moe_router");
      cuda::moe_route_sort(logits, T, E, K, spec_.norm_topk_prob, expert, weight, sorted, s.stream);
      s.mark("moe_route");
    }
    if (plan.pair_gemv) {  // act [P, I] in pair order; the combine in the down product
      const bool staged_gu = staged_gate_up() && cuda::moe_pair_gate_up_staged_supported(C);
      (staged_gu ? cuda::moe_pair_gate_up_staged : cuda::moe_pair_gate_up)(h, gate_up_.get(), expert, dt, T, K, I, C,
                                                                           act, s.stream);
      s.mark("moe_gate_up");
      const bool staged = !v1_down() && cuda::moe_pair_down_staged_supported(K, I);
      const bool bulk = staged && down_bulk_on() && cuda::moe_pair_down_bulk_supported(K, I);
      (bulk     ? cuda::moe_pair_down_combine_bulk
       : staged ? cuda::moe_pair_down_combine_staged
                : cuda::moe_pair_down_combine)(act, down_.get(), expert, weight, dt, T, K, C, I, y.f32(),
                                               a == Accum::Add, s.stream);
      s.mark("moe_down");
      return;
    }

    cuda::MoeGroupedArgs gu;
    gu.x = h;
    gu.x_rows = sorted.pair_of_slot;
    gu.x_div = K;
    gu.w = gate_up_.get();
    gu.out = act;
    gu.offsets = sorted.offsets;
    gu.tile_starts = sorted.tile_starts;
    gu.active = sorted.active;
    gu.P = P;
    gu.E = E;
    gu.N = I;
    gu.K = C;
    gu.gated = true;
    cuda::MoeGroupedArgs dn = gu;
    dn.x = act;
    dn.x_rows = nullptr;
    dn.x_div = 1;
    dn.w = down_.get();
    dn.out = out;
    dn.N = C;
    dn.K = I;
    dn.gated = false;
    const bool fast = cuda::moe_grouped_fast_supported(C, dt) && cuda::moe_grouped_fast_supported(I, dt);
    const bool old = old_gemv();
    // Few pairs per expert (moe_cuda.h, kMoe*GemvPairsPerExpert): a GEMV form, else the row tiles.
    const bool few = P <= (old ? cuda::kMoeGemvPairsPerExpert : cuda::kMoeMmaGemvPairsPerExpert) * E;
    for (const cuda::MoeGroupedArgs* g : {&gu, &dn}) {
      if (!fast) cuda::moe_grouped_naive(*g, dt, s.stream);
      else if (few && old) cuda::moe_grouped_gemv(*g, dt, s.stream);
      else if (few) cuda::moe_grouped_mma_gemv(*g, dt, s.stream);
      else cuda::moe_grouped(*g, dt, s.stream);
      s.mark(g == &gu ? "moe_gate_up" : "moe_down");
    }
    cuda::moe_combine(out, dt, sorted.slot_of_pair, weight, y.f32(), a == Accum::Add, T, K, C, s.stream);
    s.mark("moe_combine");
  }

 private:
  MoeSpec spec_;
  DType dt_;
  std::unique_ptr<CudaPreNorm> pre_;
  DeviceLinear router_;          // [E, C] dt
  cuda::DeviceBuffer gate_up_;   // [E, 2I, C] dt (gate rows, then up rows, of each expert)
  cuda::DeviceBuffer down_;      // [E, C, I] dt
  cuda::DeviceBuffer groups_;    // offsets, tile_starts, active: [E+1] i32 each, written by each forward; counter
  uint32_t* counter() const { return reinterpret_cast<uint32_t*>(groups_.as<int32_t>() + 3 * (spec_.num_experts + 1)); }
};

}  // namespace

std::unique_ptr<Mlp> make_cuda_moe(const WeightSource& w, const MoeSpec& spec, DType dt, int64_t* bytes) {
  return std::make_unique<CudaMoe>(w, spec, dt, bytes);
}

}  // namespace vlm

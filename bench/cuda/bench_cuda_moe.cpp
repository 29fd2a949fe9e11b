// Times one mixture-of-experts layer of Qwen3-30B-A3B's shape (= Qwen3-VL-30B-A3B's decoder: C
// 2048, I 768, E 128, top 8, norm_topk; bf16) kernel by kernel (kernels/cuda/moe/moe_cuda.h),
// without a checkpoint: the experts' weights are a random bf16 pattern written here, two copies
// of the layer (2.4 GB) used in turn, and each call routes one of 8 sets of random router logits
// (normal, sd 1), so the L2 (60 MB) holds neither the experts nor the routing of the call before.
// The router's own product [T, C] x [C, E] (0.5 MB of weights) is left out: the logits are given.
//
// Per token count T (--tokens, default 1,4,16,64,256,512,8192; P = 8T pairs):
//  - "kernel" rows: moe_route, moe_sort (form=-: what moe_sort picks; per_expert, and chunked for
//    P >= kMoeSortChunk: the two forms), moe_route_sort (form=one: one launch, T <= 8), the
//    gate|up and down products in each form (mma: the tensor-core GEMV moe_grouped_mma_gemv;
//    mma16: the same with 16 weight rows per block (mma_rows 16);
//    gemv: the warp GEMV moe_grouped_gemv; tiles: the mma.sync row tiles moe_grouped, 4 cp.async
//    stages (kMoeTilesV2); tiles2: the same with the 2 stages it had before (old); tiles_v2c:
//    tiles with the column tiles fastest in the grid; tiles_v3: v2c with 3 stages of k 64; a GEMV
//    form is skipped past 64 pairs per expert on average),
//    moe_combine; device events around --reps calls queued back to back (after 5 warm-up calls),
//    median of 5 repeats;
//  - "layer" rows: route_sort, gate|up, down, combine in one form (auto: the one CudaMoe picks,
//    moe_cuda.h's kMoeMmaGemvPairsPerExpert), launched one by one, and for T <= 64 also as a CUDA
//    graph of 16 layers (the decode step runs captured), time per layer.
//  - "decode" rows (T <= 4: issue 41's one-sequence step, kernels/cuda/moe/moe_decode.h), each
//    WITH the router product (0.5 MB; from one of 8 random normed-token sets, so the routing
//    differs call to call), per layer: "decode old" the five launches CudaMoe ran before
//    (VLM_MOE_DECODE=old: router GEMV, moe_route_sort, tensor-core GEMV gate|up and down,
//    moe_combine), "decode v1" the three launches of session 18 (VLM_MOE_DECODE=v1:
//    moe_router_route_sort, moe_pair_gate_up, moe_pair_down_combine) and "decode new" the three it
//    runs now (the same with moe_pair_down_combine_staged) and "decode staged" (VLM_MOE_DECODE=
//    staged: moe_pair_gate_up_staged too), launched one by one and as a graph of 16 layers; and
//    their kernels ("kernel router form=gemv", "kernel router_route_sort form=fused", "kernel
//    gate_up form=pair|staged", "kernel down_combine form=pair" (v1) and "form=staged" (new)). The kernel rows of the pair forms route each call with one of 8 sets
//    (the fused router's choices for 8 token sets, made before the timing), so the L2 does not
//    hold the call before's experts (session 18's rows reused one routing). The MoE block's
//    pre-norm (session 19, moe_decode.h 1n.): "kernel norm_router_route_sort form=separate"
//    (cuda::rms_norm then moe_router_route_sort: what CudaMoe runs today) against "form=fused"
//    (moe_norm_router_route_sort: one launch; VLM_MOE_NORM_ROUTER=1), and "decode norm_sep" (the
//    norm + "decode new") against "decode norm_fused" (the norm in the router's launch) per layer.
//    Session 20: "kernel down_combine form=bulk" (moe_pair_down_combine_bulk, 3b.: the staged form
//    filled by bulk copies) against "form=staged", and "decode norm_bulk" (norm_fused with 3b.:
//    CudaMoe's default) against "decode norm_fused" (VLM_MOE_DOWN_BULK=0). (Session 20's gate|up ring
//    and one-launch fused pair lost in call M and were removed.)
//    GB/s of the decode
//    rows counts the same expert bytes as the other rows (experts= from the given logits, ~8T
//    distinct).
// GB/s counts the expert weights a call must read: the distinct experts the 8 routings touch
// (their mean; "experts=" on each row) x 3 x I x C x 2 bytes (gate|up: 2/3 of it, down: 1/3).
// Output, one line per row: "moe T=<T> P=<P> experts=<mean touched> <kernel|layer> <name>
// form=<form> us=<per call> GB/s=<expert bytes / time> peak%=<of --peak, default 4800 GB/s>".
// Usage: bench_cuda_moe [--tokens LIST] [--reps N] [--peak GBPS]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/core/dtype.h"
#include "kernels/cuda/core/device_buffer.h"
#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/moe/moe_cuda.h"
#include "kernels/cuda/moe/moe_decode.h"
#include "kernels/cuda/ops/ops_cuda.h"

namespace {

using vlm::DType;
using vlm::cuda::DeviceBuffer;

constexpr int64_t C = 2048, I = 768, E = 128, K = 8;
constexpr int kSets = 8, kCopies = 2, kGraphLayers = 16;

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// n bytes of bf16 values uniform in [-scale, scale] (a 16 MB host pattern repeated).
DeviceBuffer random_bf16(size_t n, float scale, uint32_t seed) {
  DeviceBuffer b(n);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-scale, scale);
  const size_t pat = std::min<size_t>(n, size_t(1) << 24) / 2 * 2;
  std::vector<uint16_t> h(pat / 2);
  for (uint16_t& v : h) v = vlm::f32_to_bf16(uni(rng));
  for (size_t i = 0; i < n; i += pat)
    ok(cudaMemcpy(b.as<uint8_t>() + i, h.data(), std::min(pat, n - i), cudaMemcpyHostToDevice), "fill");
  return b;
}

// Median microseconds per call of f(i) over `reps` calls queued on s.
double time_us(const std::function<void(int)>& f, int reps, cudaStream_t s) {
  cudaEvent_t a, b;
  ok(cudaEventCreate(&a), "event");
  ok(cudaEventCreate(&b), "event");
  for (int i = 0; i < 5; ++i) f(i);
  std::vector<double> us;
  for (int rep = 0; rep < 5; ++rep) {
    ok(cudaEventRecord(a, s), "record");
    for (int i = 0; i < reps; ++i) f(i);
    ok(cudaEventRecord(b, s), "record");
    ok(cudaEventSynchronize(b), "sync");
    float ms = 0;
    ok(cudaEventElapsedTime(&ms, a, b), "elapsed");
    us.push_back(ms * 1000.0 / reps);
  }
  ok(cudaGetLastError(), "launch");
  ok(cudaEventDestroy(a), "event");
  ok(cudaEventDestroy(b), "event");
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

enum class Form { Mma, Mma16, Gemv, Tiles, Tiles2, TilesV2c, TilesV3 };
const char* form_name(Form f) {
  switch (f) {
    case Form::Mma: return "mma";
    case Form::Mma16: return "mma16";
    case Form::Gemv: return "gemv";
    case Form::Tiles: return "tiles";
    case Form::Tiles2: return "tiles2";
    case Form::TilesV2c: return "tiles_v2c";
    default: return "tiles_v3";
  }
}

// One routing set: logits and everything routing and sorting them writes.
struct Routed {
  DeviceBuffer logits, expert, weight, meta;
  vlm::cuda::MoeSorted sorted;
};


// The "decode" rows (see the top): old and new per layer, with the router product.
template <class Report>
void decode_rows(int64_t T, double touched, double layer_bytes, const std::vector<DeviceBuffer>& gate_up,
                 const std::vector<DeviceBuffer>& down, int reps, cudaStream_t s, const Report& report) {
  namespace vc = vlm::cuda;
  const int64_t P = T * K;
  DeviceBuffer router = random_bf16(static_cast<size_t>(E * C * 2), 0.03f, 21);  // [E, C]
  std::vector<DeviceBuffer> hs;  // [T, C] per set
  for (int si = 0; si < kSets; ++si) hs.push_back(random_bf16(static_cast<size_t>(T * C * 2), 1.f, 31 + si));
  DeviceBuffer logits(T * E * 4), expert(P * 4), weight(P * 4), meta((3 * (E + 1) + 2 * P + 1) * 4);
  DeviceBuffer act(P * I * 2), out(P * C * 2), y(T * C * 4);
  ok(cudaMemset(meta.get(), 0, meta.bytes()), "meta");  // the counter (last word) starts at 0
  ok(cudaMemset(y.get(), 0, y.bytes()), "y");
  vc::MoeSorted so;
  so.offsets = meta.as<int32_t>();
  so.tile_starts = so.offsets + E + 1;
  so.active = so.tile_starts + E + 1;
  so.pair_of_slot = so.active + E + 1;
  so.slot_of_pair = so.pair_of_slot + P;
  auto* counter = reinterpret_cast<uint32_t*>(so.slot_of_pair + P);
  // The pre-norm's input x [T, C] f32 per set (bf16 pairs read as f32: finite, varied), its
  // weight [C] f32 (a pattern near 1) and its output hn [T, C] bf16.
  std::vector<DeviceBuffer> xs;
  for (int si = 0; si < kSets; ++si) xs.push_back(random_bf16(static_cast<size_t>(T * C * 4), 1.f, 41 + si));
  DeviceBuffer gamma(C * 4), hn(T * C * 2);
  {
    std::vector<float> g(C);
    for (int64_t c = 0; c < C; ++c) g[c] = 0.75f + 0.5f * static_cast<float>(c % 7) / 7.f;
    ok(cudaMemcpy(gamma.get(), g.data(), C * 4, cudaMemcpyHostToDevice), "gamma");
  }
  const bool norm_fits = vc::moe_norm_router_supported(T, E, C, K, DType::BF16);
  auto grouped = [&](int i, bool gated) {
    vc::MoeGroupedArgs a;
    a.x = gated ? hs[i % kSets].get() : act.get();
    a.x_rows = gated ? so.pair_of_slot : nullptr;
    a.x_div = gated ? K : 1;
    a.w = gated ? gate_up[i % kCopies].get() : down[i % kCopies].get();
    a.out = gated ? act.get() : out.get();
    a.offsets = so.offsets;
    a.tile_starts = so.tile_starts;
    a.active = so.active;
    a.P = P;
    a.E = E;
    a.N = gated ? I : C;
    a.K = gated ? C : I;
    a.gated = gated;
    vc::moe_grouped_mma_gemv(a, DType::BF16, s);
  };
  auto router_gemv = [&](int i) {
    vc::gemv(hs[i % kSets].get(), router.get(), DType::BF16, nullptr, logits.get(), DType::F32, false, T, E, C, s);
  };
  auto fused_router = [&](int i) {
    vc::moe_router_route_sort(hs[i % kSets].get(), router.get(), DType::BF16, T, E, C, K, true, logits.as<float>(),
                              expert.as<int32_t>(), weight.as<float>(), so, counter, s);
  };
  // The fused router's choices and weights for each token set (the kernel rows' routings).
  std::vector<DeviceBuffer> set_expert, set_weight;
  for (int si = 0; si < kSets; ++si) {
    fused_router(si);
    set_expert.emplace_back(P * 4);
    set_weight.emplace_back(P * 4);
    ok(cudaMemcpyAsync(set_expert.back().get(), expert.get(), P * 4, cudaMemcpyDeviceToDevice, s), "experts");
    ok(cudaMemcpyAsync(set_weight.back().get(), weight.get(), P * 4, cudaMemcpyDeviceToDevice, s), "weights");
  }
  ok(cudaStreamSynchronize(s), "routings");
  // In a layer (routed = false) the pair kernels read what the fused router wrote; in the kernel
  // rows (routed = true) set i % kSets's routing.
  // form 0: moe_pair_gate_up (2.), 1: staged (2'.).
  auto pair_gate_up = [&](int i, int form, bool routed = false) {
    const int32_t* ex = routed ? set_expert[i % kSets].as<int32_t>() : expert.as<int32_t>();
    (form == 1 ? vc::moe_pair_gate_up_staged : vc::moe_pair_gate_up)(hs[i % kSets].get(), gate_up[i % kCopies].get(),
                                                                      ex, DType::BF16, T, K, I, C, act.get(), s);
  };
  // form 0: moe_pair_down_combine (3.), 1: staged (3'.), 2: bulk (3b., staged where the GPU lacks it).
  const bool bulk_ok = vc::moe_pair_down_bulk_supported(K, I);
  auto pair_down = [&](int i, int form, bool routed = false) {
    const int32_t* ex = routed ? set_expert[i % kSets].as<int32_t>() : expert.as<int32_t>();
    const float* wt = routed ? set_weight[i % kSets].as<float>() : weight.as<float>();
    (form == 2 && bulk_ok ? vc::moe_pair_down_combine_bulk
     : form >= 1          ? vc::moe_pair_down_combine_staged
                          : vc::moe_pair_down_combine)(act.get(), down[i % kCopies].get(), ex, wt, DType::BF16, T, K,
                                                       C, I, y.as<float>(), true, s);
  };
  auto norm_separate = [&](int i) {
    vc::rms_norm(xs[i % kSets].as<float>(), nullptr, gamma.as<float>(), 1e-6f, nullptr, T, C, hn.get(), DType::BF16,
                 s);
    vc::moe_router_route_sort(hn.get(), router.get(), DType::BF16, T, E, C, K, true, logits.as<float>(),
                              expert.as<int32_t>(), weight.as<float>(), so, counter, s);
  };
  auto norm_fused = [&](int i) {
    vc::moe_norm_router_route_sort(xs[i % kSets].as<float>(), gamma.as<float>(), 1e-6f, hn.get(), router.get(),
                                   DType::BF16, T, E, C, K, true, logits.as<float>(), expert.as<int32_t>(),
                                   weight.as<float>(), so, counter, s);
  };
  auto norm_layer = [&](int i, bool fused, bool bulk) {
    if (fused) norm_fused(i);
    else norm_separate(i);
    vc::moe_pair_gate_up(hn.get(), gate_up[i % kCopies].get(), expert.as<int32_t>(), DType::BF16, T, K, I, C,
                         act.get(), s);
    (bulk && bulk_ok ? vc::moe_pair_down_combine_bulk : vc::moe_pair_down_combine_staged)(
        act.get(), down[i % kCopies].get(), expert.as<int32_t>(), weight.as<float>(), DType::BF16, T, K, C, I,
        y.as<float>(), true, s);
  };
  auto old_layer = [&](int i) {
    router_gemv(i);
    vc::moe_route_sort(logits.as<float>(), T, E, K, true, expert.as<int32_t>(), weight.as<float>(), so, s);
    grouped(i, true);
    grouped(i, false);
    vc::moe_combine(out.get(), DType::BF16, so.slot_of_pair, weight.as<float>(), y.as<float>(), true, T, K, C, s);
  };
  auto pair_layer = [&](int i, bool staged_gate_up, int down_form) {
    fused_router(i);
    pair_gate_up(i, staged_gate_up ? 1 : 0);
    pair_down(i, down_form);
  };
  report("kernel", "router", "gemv", time_us(router_gemv, reps, s), 0);
  report("kernel", "router_route_sort", "fused", time_us(fused_router, reps, s), 0);
  if (norm_fits) {
    report("kernel", "norm_router_route_sort", "separate", time_us(norm_separate, reps, s), 0);
    report("kernel", "norm_router_route_sort", "fused", time_us(norm_fused, reps, s), 0);
  }
  report("kernel", "gate_up", "pair", time_us([&](int i) { pair_gate_up(i, 0, true); }, reps, s),
         layer_bytes * 2 / 3);
  report("kernel", "gate_up", "staged", time_us([&](int i) { pair_gate_up(i, 1, true); }, reps, s),
         layer_bytes * 2 / 3);
  report("kernel", "down_combine", "pair", time_us([&](int i) { pair_down(i, 0, true); }, reps, s),
         layer_bytes / 3);
  report("kernel", "down_combine", "staged", time_us([&](int i) { pair_down(i, 1, true); }, reps, s),
         layer_bytes / 3);
  if (bulk_ok)
    report("kernel", "down_combine", "bulk", time_us([&](int i) { pair_down(i, 2, true); }, reps, s),
           layer_bytes / 3);
  {
    const vc::MoeStagedShape sh = vc::moe_pair_down_staged_shape(T, K, C, I, DType::BF16);
    std::printf("moe T=%lld staged down: %d columns per block, %lld blocks of 256 threads, %lld B shared each, %d blocks "
                "per SM\n",
                static_cast<long long>(T), sh.rows, static_cast<long long>(sh.blocks), static_cast<long long>(sh.smem),
                sh.blocks_per_sm);
  }
  for (const char* form : {"old", "v1", "new", "staged", "norm_sep", "norm_fused", "norm_bulk"}) {
    const std::string f = form;
    if (f.rfind("norm", 0) == 0 && (!norm_fits || T > vc::kMoePairGemvMaxTokens)) continue;
    if (f == "norm_bulk" && !bulk_ok) continue;
    const std::function<void(int)> layer =
        f == "old"        ? std::function<void(int)>(old_layer)
        : f == "norm_sep" ? std::function<void(int)>([&norm_layer](int i) { norm_layer(i, false, false); })
        : f == "norm_fused"
            ? std::function<void(int)>([&norm_layer](int i) { norm_layer(i, true, false); })
        : f == "norm_bulk"
            ? std::function<void(int)>([&norm_layer](int i) { norm_layer(i, true, true); })
            : std::function<void(int)>([&pair_layer, f](int i) { pair_layer(i, f == "staged", f == "v1" ? 0 : 1); });
    report("decode", "launches", form, time_us(layer, reps, s), layer_bytes);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture");
    for (int i = 0; i < kGraphLayers; ++i) layer(i);
    ok(cudaStreamEndCapture(s, &graph), "capture");
    ok(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    const int graph_reps = std::max(1, reps / kGraphLayers);
    const double us = time_us([&](int) { ok(cudaGraphLaunch(exec, s), "graph"); }, graph_reps, s) / kGraphLayers;
    report("decode", "graph", form, us, layer_bytes);
    ok(cudaGraphExecDestroy(exec), "graph");
    ok(cudaGraphDestroy(graph), "graph");
  }
}

}  // namespace

int main(int argc, char** argv) {
  double peak = 4800;
  int reps = 50;
  std::vector<int64_t> tokens = {1, 4, 16, 64, 256, 512, 8192};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--peak") peak = std::atof(argv[i + 1]);
    else if (k == "--reps") reps = std::max(1, std::atoi(argv[i + 1]));
    else if (k == "--tokens") {
      tokens.clear();
      std::stringstream ss(argv[i + 1]);
      for (std::string t; std::getline(ss, t, ',');) tokens.push_back(std::atoll(t.c_str()));
    } else {
      std::fprintf(stderr, "usage: bench_cuda_moe [--tokens LIST] [--reps N] [--peak GBPS]\n");
      return 2;
    }
  }
  cudaStream_t s;
  ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  const size_t gu_bytes = static_cast<size_t>(E * 2 * I * C * 2), dn_bytes = static_cast<size_t>(E * C * I * 2);
  std::vector<DeviceBuffer> gate_up, down;  // [E, 2I, C], [E, C, I] bf16 per copy
  for (int c = 0; c < kCopies; ++c) {
    gate_up.push_back(random_bf16(gu_bytes, 0.03f, 1 + c));
    down.push_back(random_bf16(dn_bytes, 0.03f, 11 + c));
  }
  const size_t expert_bytes = static_cast<size_t>(3 * I * C * 2);
  for (const int64_t T : tokens) {
    const int64_t P = T * K;
    std::vector<Routed> sets(kSets);
    double touched = 0;
    for (int si = 0; si < kSets; ++si) {
      Routed& r = sets[si];
      std::mt19937 rng(static_cast<uint32_t>(100 + si + T));
      std::normal_distribution<float> nd(0.f, 1.f);
      std::vector<float> l(static_cast<size_t>(T * E));
      for (float& v : l) v = nd(rng);
      r.logits = DeviceBuffer(l.size() * 4);
      ok(cudaMemcpy(r.logits.get(), l.data(), l.size() * 4, cudaMemcpyHostToDevice), "logits");
      r.expert = DeviceBuffer(P * 4);
      r.weight = DeviceBuffer(P * 4);
      r.meta = DeviceBuffer((3 * (E + 1) + 2 * P) * 4);
      r.sorted.offsets = r.meta.as<int32_t>();
      r.sorted.tile_starts = r.sorted.offsets + E + 1;
      r.sorted.active = r.sorted.tile_starts + E + 1;
      r.sorted.pair_of_slot = r.sorted.active + E + 1;
      r.sorted.slot_of_pair = r.sorted.pair_of_slot + P;
      vlm::cuda::moe_route(r.logits.as<float>(), T, E, K, true, r.expert.as<int32_t>(), r.weight.as<float>(), s);
      vlm::cuda::moe_sort(r.expert.as<int32_t>(), P, E, r.sorted, s);
      std::vector<int32_t> ex(static_cast<size_t>(P));
      ok(cudaMemcpyAsync(ex.data(), r.expert.get(), P * 4, cudaMemcpyDeviceToHost, s), "experts");
      ok(cudaStreamSynchronize(s), "route");
      touched += static_cast<double>(std::set<int32_t>(ex.begin(), ex.end()).size()) / kSets;
    }
    DeviceBuffer h = random_bf16(T * C * 2, 1.f, 7), act(P * I * 2), out(P * C * 2), y(T * C * 4);
    const double layer_bytes = touched * expert_bytes;
    auto args = [&](int i, bool gated) {
      const Routed& r = sets[i % kSets];
      vlm::cuda::MoeGroupedArgs a;
      a.x = gated ? h.get() : act.get();
      a.x_rows = gated ? r.sorted.pair_of_slot : nullptr;
      a.x_div = gated ? K : 1;
      a.w = gated ? gate_up[i % kCopies].get() : down[i % kCopies].get();
      a.out = gated ? act.get() : out.get();
      a.offsets = r.sorted.offsets;
      a.tile_starts = r.sorted.tile_starts;
      a.active = r.sorted.active;
      a.P = P;
      a.E = E;
      a.N = gated ? I : C;
      a.K = gated ? C : I;
      a.gated = gated;
      return a;
    };
    auto product = [&](Form f, int i, bool gated) {
      vlm::cuda::MoeGroupedArgs a = args(i, gated);
      a.tile_form = f == Form::Tiles2     ? vlm::cuda::kMoeTilesOld
                    : f == Form::TilesV2c ? vlm::cuda::kMoeTilesV2c
                    : f == Form::TilesV3  ? vlm::cuda::kMoeTilesV3
                                          : vlm::cuda::kMoeTilesV2;
      a.mma_rows = f == Form::Mma16 ? 16 : 32;
      if (f == Form::Mma || f == Form::Mma16) vlm::cuda::moe_grouped_mma_gemv(a, DType::BF16, s);
      else if (f == Form::Gemv) vlm::cuda::moe_grouped_gemv(a, DType::BF16, s);
      else vlm::cuda::moe_grouped(a, DType::BF16, s);
    };
    auto route = [&](int i) {
      Routed& r = sets[i % kSets];
      vlm::cuda::moe_route(r.logits.as<float>(), T, E, K, true, r.expert.as<int32_t>(), r.weight.as<float>(), s);
    };
    auto sort = [&](int i) {
      Routed& r = sets[i % kSets];
      vlm::cuda::moe_sort(r.expert.as<int32_t>(), P, E, r.sorted, s);
    };
    auto sort_form = [&](int i, bool chunked) {
      Routed& r = sets[i % kSets];
      (chunked ? vlm::cuda::moe_sort_chunked : vlm::cuda::moe_sort_per_expert)(r.expert.as<int32_t>(), P, E, r.sorted,
                                                                                s);
    };
    auto route_sort = [&](int i) {  // what CudaMoe runs: one launch for T <= 64
      Routed& r = sets[i % kSets];
      vlm::cuda::moe_route_sort(r.logits.as<float>(), T, E, K, true, r.expert.as<int32_t>(), r.weight.as<float>(),
                                r.sorted, s);
    };
    auto combine = [&](int i) {
      const Routed& r = sets[i % kSets];
      vlm::cuda::moe_combine(out.get(), DType::BF16, r.sorted.slot_of_pair, r.weight.as<float>(), y.as<float>(), true,
                             T, K, C, s);
    };
    auto report = [&](const char* what, const char* name, const char* form, double us, double bytes) {
      const double gbs = bytes / us / 1e3;
      std::printf("moe T=%lld P=%lld experts=%.1f %s %s form=%s us=%.2f GB/s=%.0f peak%%=%.1f\n",
                  static_cast<long long>(T), static_cast<long long>(P), touched, what, name, form, us, gbs,
                  100.0 * gbs / peak);
      std::fflush(stdout);
    };
    report("kernel", "route", "-", time_us(route, reps, s), 0);
    report("kernel", "sort", "-", time_us(sort, reps, s), 0);
    report("kernel", "sort", "per_expert", time_us([&](int i) { sort_form(i, false); }, reps, s), 0);
    if (P >= vlm::cuda::kMoeSortChunk)
      report("kernel", "sort", "chunked", time_us([&](int i) { sort_form(i, true); }, reps, s), 0);
    report("kernel", "route_sort", T <= vlm::cuda::kMoeRouteSortMaxTokens ? "one" : "two",
           time_us(route_sort, reps, s), 0);
    std::vector<Form> forms = {Form::Mma,   Form::Mma16,  Form::Gemv,    Form::Tiles,
                               Form::Tiles2, Form::TilesV2c, Form::TilesV3};
    if (P > 64 * E) forms = {Form::Tiles, Form::Tiles2, Form::TilesV2c, Form::TilesV3};
    for (const Form f : forms) {
      report("kernel", "gate_up", form_name(f), time_us([&](int i) { product(f, i, true); }, reps, s),
             layer_bytes * 2 / 3);
      report("kernel", "down", form_name(f), time_us([&](int i) { product(f, i, false); }, reps, s), layer_bytes / 3);
    }
    report("kernel", "combine", "-", time_us(combine, reps, s), 0);
    const Form chosen = P <= vlm::cuda::kMoeMmaGemvPairsPerExpert * E ? Form::Mma : Form::Tiles;
    std::vector<std::pair<Form, const char*>> layer_forms = {{chosen, "auto"}};
    for (const Form f : forms) layer_forms.emplace_back(f, form_name(f));
    for (const auto& lf : layer_forms) {
      const Form f = lf.first;
      auto layer = [&](int i) {
        route_sort(i);
        product(f, i, true);
        product(f, i, false);
        combine(i);
      };
      const std::string name = std::string(lf.second) == form_name(f) ? lf.second : std::string(lf.second) + "=" + form_name(f);
      report("layer", "launches", name.c_str(), time_us(layer, reps, s), layer_bytes);
      if (T > 64) continue;
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture");
      for (int i = 0; i < kGraphLayers; ++i) layer(i);
      ok(cudaStreamEndCapture(s, &graph), "capture");
      ok(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
      const int graph_reps = std::max(1, reps / kGraphLayers);
      const double us = time_us([&](int) { ok(cudaGraphLaunch(exec, s), "graph"); }, graph_reps, s) / kGraphLayers;
      report("layer", "graph", name.c_str(), us, layer_bytes);
      ok(cudaGraphExecDestroy(exec), "graph");
      ok(cudaGraphDestroy(graph), "graph");
    }
    if (T <= vlm::cuda::kGemvMaxRows) decode_rows(T, touched, layer_bytes, gate_up, down, reps, s, report);
  }
  ok(cudaStreamDestroy(s), "stream");
  return 0;
}

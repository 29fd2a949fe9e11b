// Times the decode GEMVs (kernels/cuda/gemm/gemv.h) v1 against v2 (VLM_CUDA_GEMV) at a Qwen3-8B
// decode step's shapes (hidden 4096, q/k/v 6144, intermediate 12288, vocab 151936; BF16):
//  - "step": ONE CUDA graph of the step's GEMV sequence, 36 x [q/k/v + RMSNorm (gemv_norm), o
//    (gemv, f32 +=), gate/up + RMSNorm + SiLU*mul (gemv_silu_mul_norm), down (gemv, f32 +=)] + the
//    LM head (gemv_norm, f32 out), each layer with its own weights (15.1 GB in all, far above L2);
//  - per shape: a graph of the 36 layers' calls of that one shape (the LM head: 8 calls).
// Each graph launched 3 times to warm, then 20 times between events; median ms. Output lines:
//   "gemv <what> M=<rows> <v1|v2> [pdl] ms=<per graph> us_per_call=<..> TB/s=<weight bytes / time>"
// then "gemv <what> M=<rows> v2/v1=<time ratio>". Weights are a constant byte pattern (the values
// do not change the time). Usage: bench_cuda_gemv [--rows 1,2,4] [--pdl] (PDL: launches inside a
// PdlScope, as CudaDecoder's VLM_CUDA_PDL=1).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/core/device_buffer.h"
#include "kernels/cuda/core/pdl.h"
#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/gemm/gemv_norm.h"

namespace {

using vlm::DType;
using vlm::cuda::DeviceBuffer;
using vlm::cuda::GemvVersion;

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

constexpr int64_t kHidden = 4096, kQkv = 6144, kInter = 12288, kVocab = 151936, kLayers = 36, kHeadCalls = 8;
constexpr float kEps = 1e-6f;

DeviceBuffer pattern(size_t bytes, int byte) {
  DeviceBuffer b(bytes);
  ok(cudaMemset(b.get(), byte, bytes), "memset");
  return b;
}

struct Layer {
  DeviceBuffer qkv, o, gate_up, down;  // [6144, 4096], [4096, 4096], [2 x 12288, 4096], [4096, 12288] bf16
};

struct Step {
  int64_t M;
  std::vector<Layer> layers;
  DeviceBuffer head, norm_w, resid, qkv_out, attn, act, logits;
  explicit Step(int64_t rows) : M(rows) {
    for (int64_t l = 0; l < kLayers; ++l)
      layers.push_back({pattern(kQkv * kHidden * 2, 0x20), pattern(kHidden * kHidden * 2, 0x20),
                        pattern(2 * kInter * kHidden * 2, 0x20), pattern(kHidden * kInter * 2, 0x20)});
    head = pattern(kVocab * kHidden * 2, 0x20);
    norm_w = pattern(kHidden * 4, 0);
    resid = pattern(M * kHidden * 4, 0);
    qkv_out = pattern(M * kQkv * 2, 0);
    attn = pattern(M * kHidden * 2, 0x20);
    act = pattern(M * kInter * 2, 0);
    logits = pattern(M * kVocab * 4, 0);
  }
  const float* x() const { return static_cast<const float*>(resid.get()); }
  const float* nw() const { return static_cast<const float*>(norm_w.get()); }
  void qkv(const Layer& L, cudaStream_t s) {
    vlm::cuda::gemv_norm(x(), nullptr, nw(), kEps, L.qkv.get(), DType::BF16, nullptr, qkv_out.get(), DType::BF16,
                         false, M, kQkv, kHidden, s);
  }
  void o(const Layer& L, cudaStream_t s) {
    vlm::cuda::gemv(attn.get(), L.o.get(), DType::BF16, nullptr, resid.get(), DType::F32, true, M, kHidden, kHidden, s);
  }
  void gate_up(const Layer& L, cudaStream_t s) {
    vlm::cuda::gemv_silu_mul_norm(x(), nullptr, nw(), kEps, L.gate_up.get(), DType::BF16, nullptr, act.get(), M,
                                  kInter, kHidden, s);
  }
  void down(const Layer& L, cudaStream_t s) {
    vlm::cuda::gemv(act.get(), L.down.get(), DType::BF16, nullptr, resid.get(), DType::F32, true, M, kHidden, kInter,
                    s);
  }
  void lm_head(cudaStream_t s) {
    vlm::cuda::gemv_norm(x(), nullptr, nw(), kEps, head.get(), DType::BF16, nullptr, logits.get(), DType::F32, false,
                         M, kVocab, kHidden, s);
  }
};

// Median ms of one launch of the graph that `enqueue` captures.
double time_graph(const std::function<void(cudaStream_t)>& enqueue, cudaStream_t s) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture");
  enqueue(s);
  ok(cudaStreamEndCapture(s, &g), "end capture");
  ok(cudaGraphInstantiate(&ge, g, 0), "instantiate");
  cudaEvent_t e0, e1;
  ok(cudaEventCreate(&e0), "event");
  ok(cudaEventCreate(&e1), "event");
  std::vector<float> t;
  for (int i = 0; i < 23; ++i) {
    ok(cudaEventRecord(e0, s), "record");
    ok(cudaGraphLaunch(ge, s), "launch");
    ok(cudaEventRecord(e1, s), "record");
    ok(cudaEventSynchronize(e1), "sync");
    float ms = 0;
    ok(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
    if (i >= 3) t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  ok(cudaGraphExecDestroy(ge), "destroy");
  ok(cudaGraphDestroy(g), "destroy");
  ok(cudaEventDestroy(e0), "event");
  ok(cudaEventDestroy(e1), "event");
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> rows = {1, 2, 4};
  bool pdl = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--pdl") == 0) {
      pdl = true;
    } else if (std::strcmp(argv[i], "--rows") == 0 && i + 1 < argc) {
      rows.clear();
      for (const char* p = argv[++i]; *p;) {
        rows.push_back(std::strtoll(p, const_cast<char**>(&p), 10));
        if (*p == ',') ++p;
      }
    } else {
      std::fprintf(stderr, "usage: bench_cuda_gemv [--rows 1,2,4] [--pdl]\n");
      return 2;
    }
  }
  cudaStream_t s;
  ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  const double layer_bytes = 2.0 * kHidden * (kQkv + kHidden + 2 * kInter + kInter);
  const double head_bytes = 2.0 * kVocab * kHidden;
  for (const int64_t M : rows) {
    Step step(M);
    struct Row {
      const char* what;
      double bytes;  // weight bytes per graph
      int calls;
      std::function<void(cudaStream_t)> enqueue;
    };
    auto each_layer = [&](void (Step::*f)(const Layer&, cudaStream_t)) {
      return [&step, f](cudaStream_t st) {
        for (const Layer& L : step.layers) (step.*f)(L, st);
      };
    };
    const std::vector<Row> table = {
        {"step", kLayers * layer_bytes + head_bytes, int(4 * kLayers + 1),
         [&](cudaStream_t st) {
           for (const Layer& L : step.layers) {
             step.qkv(L, st);
             step.o(L, st);
             step.gate_up(L, st);
             step.down(L, st);
           }
           step.lm_head(st);
         }},
        {"qkv_norm[6144x4096]", kLayers * 2.0 * kQkv * kHidden, int(kLayers), each_layer(&Step::qkv)},
        {"o[4096x4096]+=", kLayers * 2.0 * kHidden * kHidden, int(kLayers), each_layer(&Step::o)},
        {"gate_up_norm_silu[2x12288x4096]", kLayers * 4.0 * kInter * kHidden, int(kLayers), each_layer(&Step::gate_up)},
        {"down[4096x12288]+=", kLayers * 2.0 * kHidden * kInter, int(kLayers), each_layer(&Step::down)},
        {"lm_head_norm[151936x4096]", kHeadCalls * head_bytes, int(kHeadCalls),
         [&](cudaStream_t st) {
           for (int i = 0; i < kHeadCalls; ++i) step.lm_head(st);
         }},
    };
    for (const Row& r : table) {
      double ms[2] = {0, 0};
      for (int v = 0; v < 2; ++v) {
        vlm::cuda::gemv_set_version(v == 0 ? GemvVersion::V1 : GemvVersion::V2);
        vlm::cuda::PdlScope scope(pdl && vlm::cuda::pdl_supported(0));
        ms[v] = time_graph(r.enqueue, s);
        std::printf("gemv %s M=%lld %s%s ms=%.4f us_per_call=%.2f TB/s=%.3f\n", r.what, static_cast<long long>(M),
                    v == 0 ? "v1" : "v2", pdl ? " pdl" : "", ms[v], 1e3 * ms[v] / r.calls, r.bytes / ms[v] / 1e9);
      }
      std::printf("gemv %s M=%lld v2/v1=%.4f\n", r.what, static_cast<long long>(M), ms[1] / ms[0]);
      std::fflush(stdout);
    }
  }
  return 0;
}

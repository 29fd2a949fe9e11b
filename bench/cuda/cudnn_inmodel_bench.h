// Issue 44's rows of bench_cuda_attention ("inmodel [N...]"): cuDNN's fused attention as the
// decoder calls it for a first chunk beside the standalone call, with and without a layer's GEMMs
// between calls, the SM clock / power sampled through NVML (what each row is: the .cpp's head).
// Qwen2-7B's shape (28 query / 4 KV heads, D 128, hidden 3584, intermediate 18944), bf16.
#pragma once

#include "bench/cuda/nvml_sampler.h"

namespace vlm::bench {

// Prints the rows for one sequence of n tokens ("inmodel tokens=n row=... attn_ms=... tflops=...").
void bench_cudnn_inmodel(int n, NvmlSampler& nvml);

}  // namespace vlm::bench

// The shape limits of the mixture-of-experts kernels (moe_cuda.h), host-only so that the
// load-time checks (engine/backends/cuda_model_support.h) read them without the CUDA headers.
#pragma once

#include <cstdint>

namespace vlm::cuda {

constexpr int64_t kMoeMaxExperts = 1024;  // routing keeps a token's E probabilities in shared memory
constexpr int64_t kMoeMaxTopK = 32;       // one choice per lane of a warp

}  // namespace vlm::cuda

// Act: an activation as the architecture files see it — rows of `cols` values in a backend's
// memory. Architectures pass Acts from layer to layer and never index them; the backend that made
// an Act owns its layout (the CPU keeps a fused q/k/v projection as three planes [T,QD] [T,KD]
// [T,KD] in one buffer, the GPU as interleaved rows [T, QD+2KD]) and its dtype (ActRole).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/core/dtype.h"

namespace vlm {

// What an activation holds fixes its dtype per backend: Residual and Logits are f32 on every
// backend; Hidden is f32 on the CPU and the compute dtype on the GPU.
enum class ActRole { Residual, Hidden, Logits };

// y = f(x), or y += f(x) (the residual add, which a GPU backend does in the GEMM's epilogue).
enum class Accum { Write, Add };

struct Act {
  void* data = nullptr;
  int64_t rows = 0, cols = 0;  // [rows, cols], row-major, contiguous
  DType dtype = DType::F32;
  float* f32() const { return static_cast<float*>(data); }
};

// The named activations of an architecture's forward: the runner sizes each once and hands them
// out by index (Step::act). A decoder's buffers have the step's tokens or its logit rows as rows;
// an encoder call states its rows (it knows its patches and merged units).
struct ActivationPlan {
  struct Buf {
    int64_t cols = 0;
    ActRole role = ActRole::Hidden;
    bool logit_rows = false;  // [R, cols] (the rows whose logits are wanted), else [T, cols]
    int64_t rows = 0;         // > 0: [rows, cols] whatever the step
  };
  std::vector<Buf> bufs;
};

// x viewed as [rows, cols] (same values, row-major; rows * cols == x.rows * x.cols).
Act reshaped(const Act& x, int64_t rows, int64_t cols);
// Rows [begin, begin + n) of x (row-major; 0 <= begin, begin + n <= x.rows).
Act row_slice(const Act& x, int64_t begin, int64_t n);

}  // namespace vlm

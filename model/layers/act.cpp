#include "model/layers/act.h"

#include "kernels/core/check.h"

namespace vlm {

Act reshaped(const Act& x, int64_t rows, int64_t cols) {
  VLM_CHECK(rows * cols == x.rows * x.cols, "cannot view [{}, {}] as [{}, {}]", x.rows, x.cols, rows, cols);
  return Act{x.data, rows, cols, x.dtype};
}

}  // namespace vlm

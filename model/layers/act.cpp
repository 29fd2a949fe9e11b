#include "model/layers/act.h"

#include "kernels/core/check.h"

namespace vlm {

Act reshaped(const Act& x, int64_t rows, int64_t cols) {
  VLM_CHECK(rows * cols == x.rows * x.cols, "cannot view [{}, {}] as [{}, {}]", x.rows, x.cols, rows, cols);
  return Act{x.data, rows, cols, x.dtype};
}

Act row_slice(const Act& x, int64_t begin, int64_t n) {
  VLM_CHECK(begin >= 0 && n >= 0 && begin + n <= x.rows, "rows [{}, {}) of {}", begin, begin + n, x.rows);
  const auto row_bytes = x.cols * static_cast<int64_t>(dtype_size(x.dtype));
  return Act{static_cast<char*>(x.data) + begin * row_bytes, n, x.cols, x.dtype};
}

}  // namespace vlm

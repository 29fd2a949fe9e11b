#include "model/layers/linear_parts.h"

#include <algorithm>

#include "kernels/core/check.h"

namespace vlm {

std::vector<HostLinearPart> load_linear_parts(const WeightSource& w, const std::vector<LinearPart>& parts) {
  std::vector<HostLinearPart> loaded;
  for (const LinearPart& p : parts) {
    // Rows only (a dummy store makes just them: each tensor-parallel rank its own).
    const int64_t N = p.weight.shape[0], K = p.weight.shape.numel() / std::max<int64_t>(N, 1);
    const int64_t b = p.row_begin, e = p.row_end < 0 ? N : p.row_end;
    VLM_CHECK(0 <= b && b < e && e <= N, "rows [{}, {}) of {} ({} rows)", b, e, p.weight.name, N);
    const TensorView rows = p.row_begin == 0 && p.row_end < 0 ? w.get(p.weight) : w.get_rows(p.weight, b, e);
    HostLinearPart part{TensorView(rows.data, rows.dtype, {e - b, K}), {}};
    if (!p.bias.empty()) {
      const TensorView bias = w.get(p.bias, {N});
      part.bias = Tensor::empty({e - b}, DType::F32);
      convert_to_f32(static_cast<const char*>(bias.data) + b * static_cast<int64_t>(dtype_size(bias.dtype)), bias.dtype,
                     part.bias.as<float>(), e - b);
    }
    loaded.push_back(std::move(part));
  }
  return loaded;
}

}  // namespace vlm

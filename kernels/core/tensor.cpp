#include "kernels/core/tensor.h"

#include <cstdlib>
#include <cstring>

namespace vlm {

Shape::Shape(std::initializer_list<int64_t> d) {
  VLM_CHECK(d.size() <= kMaxDims, "{} dims, at most {}", d.size(), kMaxDims);
  for (int64_t x : d) dims[ndim++] = x;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= dims[i];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (ndim != o.ndim) return false;
  for (int i = 0; i < ndim; ++i)
    if (dims[i] != o.dims[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

TensorView TensorView::row(int64_t i) const {
  VLM_CHECK(shape.ndim >= 2 && i >= 0 && i < shape[0], "row {} of shape {}", i, shape.str());
  Shape s;
  s.ndim = shape.ndim - 1;
  for (int d = 1; d < shape.ndim; ++d) s.dims[d - 1] = shape[d];
  auto* base = static_cast<char*>(data) + i * s.numel() * static_cast<int64_t>(dtype_size(dtype));
  return TensorView(base, dtype, s);
}

void Tensor::FreeDeleter::operator()(void* p) const { std::free(p); }

Tensor Tensor::empty(Shape shape, DType dtype) {
  Tensor t;
  int64_t bytes = shape.numel() * static_cast<int64_t>(dtype_size(dtype));
  VLM_CHECK(bytes >= 0, "negative size for shape {}", shape.str());
  size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!p) throw std::bad_alloc();
  t.storage_.reset(p);
  t.view_ = TensorView(p, dtype, shape);
  return t;
}

Tensor Tensor::zeros(Shape shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  std::memset(t.data(), 0, static_cast<size_t>(t.nbytes()));
  return t;
}

}  // namespace vlm

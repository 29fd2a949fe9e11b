// TensorView: a non-owning, contiguous, row-major view (data pointer, dtype, up to 4 dims).
// Tensor: an owning, 64-byte-aligned buffer with the same shape description.
// Views never own memory: the owner (a Tensor, a mmapped file) must outlive them.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "kernels/core/check.h"
#include "kernels/core/dtype.h"

namespace vlm {

constexpr int kMaxDims = 5;  // 5: Conv3d weights (Qwen2-VL patch embedding)

struct Shape {
  std::array<int64_t, kMaxDims> dims{};
  int ndim = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);
  int64_t operator[](int i) const { return dims[i]; }
  int64_t numel() const;
  bool operator==(const Shape& o) const;
  std::string str() const;  // "[4, 16]"
};

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::F32;
  Shape shape;

  TensorView() = default;
  TensorView(void* d, DType t, Shape s) : data(d), dtype(t), shape(s) {}

  int64_t numel() const { return shape.numel(); }
  int64_t nbytes() const { return numel() * static_cast<int64_t>(dtype_size(dtype)); }
  int64_t dim(int i) const { return shape[i]; }
  int ndim() const { return shape.ndim; }
  bool empty() const { return data == nullptr; }

  // Typed pointer; checks the dtype matches T (float <-> F32, int32_t <-> I32, ...).
  template <typename T>
  T* as() const;
  // View of row i along dim 0 (ndim >= 2): shape drops the first dim.
  TensorView row(int64_t i) const;
};

class Tensor {
 public:
  Tensor() = default;
  // Uninitialized storage of the given shape.
  static Tensor empty(Shape shape, DType dtype = DType::F32);
  // Zero-filled storage.
  static Tensor zeros(Shape shape, DType dtype = DType::F32);

  TensorView view() const { return view_; }
  void* data() const { return view_.data; }
  template <typename T>
  T* as() const { return view_.as<T>(); }
  const Shape& shape() const { return view_.shape; }
  DType dtype() const { return view_.dtype; }
  int64_t numel() const { return view_.numel(); }
  int64_t nbytes() const { return view_.nbytes(); }

 private:
  struct FreeDeleter {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, FreeDeleter> storage_;
  TensorView view_;
};

template <typename T>
struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::F32; };
template <> struct DTypeOf<const float> { static constexpr DType value = DType::F32; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::I32; };
template <> struct DTypeOf<const int32_t> { static constexpr DType value = DType::I32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::I64; };
template <> struct DTypeOf<const int64_t> { static constexpr DType value = DType::I64; };
template <> struct DTypeOf<uint16_t> { static constexpr DType value = DType::BF16; };  // or F16
template <> struct DTypeOf<const uint16_t> { static constexpr DType value = DType::BF16; };

template <typename T>
T* TensorView::as() const {
  constexpr DType want = DTypeOf<T>::value;
  if constexpr (want == DType::BF16) {
    VLM_CHECK(dtype == DType::BF16 || dtype == DType::F16, "16-bit view of a {} tensor",
              dtype_name(dtype));
  } else {
    VLM_CHECK(dtype == want, "view as {} of a {} tensor", dtype_name(want), dtype_name(dtype));
  }
  return static_cast<T*>(data);
}

}  // namespace vlm

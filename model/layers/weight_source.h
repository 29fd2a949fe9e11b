// WeightSource: a checkpoint's tensors under a name prefix, as layers load them. Every lookup
// states the shape it expects; a missing tensor or another shape is a LoadError naming the
// checkpoint and the tensor (WeightStore::get, or whatever lookup the source was made with:
// benchmarks make random weights on demand).
#pragma once

#include <algorithm>
#include <functional>
#include <optional>
#include <string>

#include "kernels/core/check.h"
#include "model/decoder/weights.h"

namespace vlm {

// Returns the checkpoint tensor `name`, checked against `expected`; throws LoadError otherwise.
using WeightLookup = std::function<TensorView(const std::string& name, const Shape& expected)>;

// A tensor the layer needs: its name under the prefix and its shape.
struct WeightRef {
  std::string name;
  Shape shape;
};

// One part of a (possibly fused) linear layer: weight [N, K], optional bias [N] (empty name:
// none). A layer of several parts (q|k|v, gate|up) computes each part from the same input. A
// weight of more than two dims (a conv kernel [N, ...]) is read as [N, product of the rest]. A
// part may be rows [row_begin, row_end) of its tensor (e.g. q of a checkpoint's fused qkv).
struct LinearPart {
  WeightRef weight;
  std::string bias;
  int64_t row_begin = 0, row_end = -1;  // -1: all rows
};

// An FP8 checkpoint's weight `name` as stored (WeightStore::fp8), or nullopt when it is not one.
using Fp8Lookup = std::function<std::optional<Fp8Weight>(const std::string& name, const Shape& expected)>;
// Rows [r0, r1) of `name` whose whole shape is `full` (read as [N, rest]): [r1 - r0, rest].
using RowsLookup = std::function<TensorView(const std::string& name, const Shape& full, int64_t r0, int64_t r1)>;

class WeightSource {
 public:
  WeightSource(const WeightStore& store, std::string prefix)
      : lookup_([&store](const std::string& n, const Shape& s) { return store.get(n, s); }),
        fp8_([&store](const std::string& n, const Shape& s) -> std::optional<Fp8Weight> {
          if (!store.is_fp8(n)) return std::nullopt;
          return store.fp8(n, s);
        }),
        rows_([&store](const std::string& n, const Shape& s, int64_t r0, int64_t r1) {
          return store.get_slice(n, s, r0, r1, 0, s.numel() / s[0]);
        }),
        prefix_(std::move(prefix)) {}
  WeightSource(WeightLookup lookup, std::string prefix) : lookup_(std::move(lookup)), prefix_(std::move(prefix)) {}
  TensorView get(const WeightRef& ref) const { return lookup_(prefix_ + ref.name, ref.shape); }
  TensorView get(const std::string& name, const Shape& shape) const { return lookup_(prefix_ + name, shape); }
  // Rows [r0, r1) of ref ([N, rest] read as such): [r1 - r0, rest]. A dummy store makes only
  // them (tensor parallelism: each rank its rows, WeightStore::get_slice); else a view of get(ref).
  TensorView get_rows(const WeightRef& ref, int64_t r0, int64_t r1) const;
  // The stored FP8 weight of ref (its q and scales), or nullopt: not an FP8 checkpoint's FP8
  // weight (get() then gives its values; on an FP8 weight get() gives them dequantized to f32).
  std::optional<Fp8Weight> fp8(const WeightRef& ref) const {
    return fp8_ ? fp8_(prefix_ + ref.name, ref.shape) : std::nullopt;
  }
  // A source for the tensors under prefix() + sub (e.g. "blocks.3.").
  WeightSource under(const std::string& sub) const {
    WeightSource w(lookup_, prefix_ + sub);
    w.fp8_ = fp8_;
    w.rows_ = rows_;
    return w;
  }
  // The same source with these FP8 / rows lookups (null: none; a sharded source's own).
  WeightSource with_lookups(Fp8Lookup fp8, RowsLookup rows) const {
    WeightSource w(lookup_, prefix_);
    w.fp8_ = std::move(fp8);
    w.rows_ = std::move(rows);
    return w;
  }
  const std::string& prefix() const { return prefix_; }

 private:
  WeightLookup lookup_;
  Fp8Lookup fp8_;  // null: no FP8 weights (a lookup-made source)
  RowsLookup rows_;  // null: rows are views of get()
  std::string prefix_;
};

inline TensorView WeightSource::get_rows(const WeightRef& ref, int64_t r0, int64_t r1) const {
  if (rows_) return rows_(prefix_ + ref.name, ref.shape, r0, r1);
  const TensorView t = get(ref);
  const int64_t N = t.dim(0), K = t.numel() / std::max<int64_t>(N, 1);
  if (!(0 <= r0 && r0 < r1 && r1 <= N))
    throw LoadError(prefix_ + ref.name + ": rows [" + std::to_string(r0) + ", " + std::to_string(r1) + ") of " +
                    std::to_string(N));
  const auto elt = static_cast<int64_t>(dtype_size(t.dtype));
  return TensorView(static_cast<char*>(t.data) + r0 * K * elt, t.dtype, {r1 - r0, K});
}

}  // namespace vlm

// WeightSource: a checkpoint's tensors under a name prefix, as layers load them. Every lookup
// states the shape it expects; a missing tensor or another shape is a LoadError naming the
// checkpoint and the tensor (WeightStore::get, or whatever lookup the source was made with:
// benchmarks make random weights on demand).
#pragma once

#include <functional>
#include <optional>
#include <string>

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

class WeightSource {
 public:
  WeightSource(const WeightStore& store, std::string prefix)
      : lookup_([&store](const std::string& n, const Shape& s) { return store.get(n, s); }),
        fp8_([&store](const std::string& n, const Shape& s) -> std::optional<Fp8Weight> {
          if (!store.is_fp8(n)) return std::nullopt;
          return store.fp8(n, s);
        }),
        prefix_(std::move(prefix)) {}
  WeightSource(WeightLookup lookup, std::string prefix) : lookup_(std::move(lookup)), prefix_(std::move(prefix)) {}
  TensorView get(const WeightRef& ref) const { return lookup_(prefix_ + ref.name, ref.shape); }
  TensorView get(const std::string& name, const Shape& shape) const { return lookup_(prefix_ + name, shape); }
  // The stored FP8 weight of ref (its q and scales), or nullopt: not an FP8 checkpoint's FP8
  // weight (get() then gives its values; on an FP8 weight get() gives them dequantized to f32).
  std::optional<Fp8Weight> fp8(const WeightRef& ref) const {
    return fp8_ ? fp8_(prefix_ + ref.name, ref.shape) : std::nullopt;
  }
  // A source for the tensors under prefix() + sub (e.g. "blocks.3.").
  WeightSource under(const std::string& sub) const {
    WeightSource w(lookup_, prefix_ + sub);
    w.fp8_ = fp8_;
    return w;
  }
  const std::string& prefix() const { return prefix_; }

 private:
  WeightLookup lookup_;
  Fp8Lookup fp8_;  // null: no FP8 weights (a lookup-made source)
  std::string prefix_;
};

}  // namespace vlm

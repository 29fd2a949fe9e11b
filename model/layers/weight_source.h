// WeightSource: a checkpoint's tensors under a name prefix, as layers load them. Every lookup
// states the shape it expects; a missing tensor or another shape is a LoadError naming the
// checkpoint and the tensor (WeightStore::get).
#pragma once

#include <string>

#include "model/decoder/weights.h"

namespace vlm {

// A tensor the layer needs: its name under the prefix and its shape.
struct WeightRef {
  std::string name;
  Shape shape;
};

// One part of a (possibly fused) linear layer: weight [N, K], optional bias [N] (empty name:
// none). A layer of several parts (q|k|v, gate|up) computes each part from the same input.
struct LinearPart {
  WeightRef weight;
  std::string bias;
};

class WeightSource {
 public:
  WeightSource(const WeightStore& store, std::string prefix) : store_(store), prefix_(std::move(prefix)) {}
  TensorView get(const WeightRef& ref) const { return store_.get(prefix_ + ref.name, ref.shape); }
  TensorView get(const std::string& name, const Shape& shape) const { return store_.get(prefix_ + name, shape); }
  bool has(const std::string& name) const { return store_.has(prefix_ + name); }
  // A source for the tensors under prefix() + sub (e.g. "layers.3.").
  WeightSource under(const std::string& sub) const { return WeightSource(store_, prefix_ + sub); }
  const std::string& prefix() const { return prefix_; }
  const WeightStore& store() const { return store_; }

 private:
  const WeightStore& store_;
  std::string prefix_;
};

}  // namespace vlm

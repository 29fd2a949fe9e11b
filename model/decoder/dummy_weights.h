// DummyWeights: a checkpoint's tensors made on request from config.json alone (vLLM's
// `--load-format dummy`), so a model of any size can be measured without its safetensors.
// Every tensor an architecture asks for (name, shape) is made then, in the config's dtype, and
// filled from a counter-based generator seeded by the tensor's NAME alone (FNV-1a of the name
// through splitmix64; element group j = splitmix64(seed + (j + 1) * golden), 4 values of 16 bits
// each): the values do not depend on the order of requests, the thread count or the budget, so
// two loads (and a tensor made again after it was dropped) are bit-equal. Values:
//   *norm*.weight / *ln_*.weight (norm scales): 1;  *.bias: uniform in [-0.002, 0.002];
//   every other tensor: uniform in [-a, a], a = 0.02 * sqrt(3) (std 0.02, transformers' init).
// Filling runs on the global thread pool (kernels/core/thread_pool.h).
// Slices (tensor parallelism, issue 42): get_slice() makes only a block [r0, r1) x [c0, c1) of a
// tensor, each element the value of its global index (row * cols + col) in the whole tensor, so
// N ranks that each make their slice hold exactly the whole tensor's values and the load makes each
// tensor once, not once per rank. A slice is held under its own key (the name and the ranges).
//
// Memory: keep_bytes < 0 keeps every tensor made while the object lives (the CPU layers compute
// over views into them). keep_bytes >= 0 is the streaming form for GPU loaders, which upload a
// layer's tensors before they ask for the next layer's: made tensors are dropped, oldest first,
// once more than keep_bytes would be held, so the host never holds the whole model (a single
// tensor larger than keep_bytes is still made and held until the next one). A view stays valid
// until keep_bytes of other tensors have been made after it (a dropped tensor's buffer may be
// refilled at once for a new tensor of its shape: the layers of a model repeat their shapes, so the
// host writes the same pages again instead of faulting in fresh ones).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/core/tensor.h"

namespace vlm {

class DummyWeights {
 public:
  // model_dir: for messages; dtype: F32, BF16 or F16 (what the tensors are made in).
  DummyWeights(std::string model_dir, DType dtype, int64_t keep_bytes);

  // The tensor `name` of `shape`, made now unless it is held. Throws LoadError when `name` was
  // asked for before with another shape (a checkpoint has one shape per name) or the shape is
  // empty. Thread-safe.
  TensorView get(const std::string& name, const Shape& shape);

  // Rows [r0, r1) x columns [c0, c1) of tensor `name` of shape `full` (read as [full[0], rest]):
  // a [r1 - r0, c1 - c0] tensor (of full's ndim when the columns are all of them), made now unless
  // held. The same checks as get() on `full`; LoadError for a range outside it.
  TensorView get_slice(const std::string& name, const Shape& full, int64_t r0, int64_t r1, int64_t c0, int64_t c1);

  // Fills `out` (F32, BF16 or F16) with the values of tensor `name` (the rule above).
  static void fill(const std::string& name, const TensorView& out);
  // Fills `out` [r1 - r0, c1 - c0] with elements (r0.., c0..) of tensor `name` of `cols` columns:
  // bit-equal to the same elements of fill() over the whole tensor.
  static void fill_slice(const std::string& name, int64_t cols, int64_t r0, int64_t c0, const TensorView& out);

  DType dtype() const { return dtype_; }
  int64_t keep_bytes() const { return keep_bytes_; }
  // The tensors held now, by name (every tensor made when keep_bytes < 0). Not to be read while
  // another thread calls get().
  const std::map<std::string, TensorView>& held() const { return views_; }
  // Every (name, shape) asked for, in the order first asked.
  std::vector<std::pair<std::string, Shape>> made() const;
  int64_t bytes_held() const;
  int64_t bytes_made() const;  // counting every making (a dropped tensor made again counts twice)

 private:
  std::string dir_;
  DType dtype_;
  int64_t keep_bytes_;
  mutable std::mutex mu_;
  std::map<std::string, Tensor> tensors_;     // held
  std::map<std::string, TensorView> views_;   // held, as views
  std::deque<std::string> order_;             // held names, oldest first
  std::map<std::string, Shape> shapes_;       // every name asked for
  std::vector<std::string> first_asked_;
  int64_t held_bytes_ = 0, made_bytes_ = 0;
  // Makes (or finds held) the tensor of key `key` and shape `shape`, filled by `fill_fn`. Locked.
  template <class Fill>
  TensorView make_locked(const std::string& key, const Shape& shape, Fill fill_fn);
  void check_shape_locked(const std::string& name, const Shape& shape);
};

}  // namespace vlm

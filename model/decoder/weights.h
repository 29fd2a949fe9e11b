// All tensors of a Hugging Face checkpoint directory, by checkpoint name. Reads either one
// `model.safetensors` or the shards listed in `model.safetensors.index.json` (weight_map).
// Weights stay memory-mapped in their stored dtype; views are valid while the store lives.
// FP8 checkpoints (config.json's quantization_config, model/decoder/weight_quantization.h): fp8()
// gives a layer's stored FP8 weight and its scales (the GPU keeps them FP8); get() of such a weight
// dequantizes it once to f32 (exact w.r.t. the stored values: the CPU computes over those), kept
// by the store.
// `--load-format dummy` (WeightStore::dummy, model/decoder/dummy_weights.h): no safetensors; every
// tensor is made on request from config.json with the shape the architecture asks for.
#pragma once

#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/core/tensor.h"
#include "model/decoder/dummy_weights.h"
#include "model/decoder/safetensors.h"
#include "model/decoder/weight_quantization.h"

namespace vlm {

// Where a checkpoint's weights come from (vLLM's --load-format names): auto and safetensors read
// the safetensors files (the only stored format); dummy makes them (DummyWeights).
enum class LoadFormat { Auto, Safetensors, Dummy };
// "auto", "safetensors" or "dummy"; nullopt for anything else.
std::optional<LoadFormat> parse_load_format(std::string_view s);

struct WeightLoadOptions {
  LoadFormat format = LoadFormat::Auto;
  // Dummy only: DummyWeights' keep_bytes (< 0: keep every tensor, what CPU layers need; >= 0: the
  // streaming form for GPU loaders, the host holding at most about this many bytes of weights).
  int64_t dummy_keep_bytes = -1;
};
// The streaming budget the GPU tools use with --load-format dummy (a 72B model's largest tensor,
// its embedding, is 2.5 GB; a layer's fused gate|up 0.97 GB).
constexpr int64_t kDummyStreamBytes = int64_t{6} << 30;

class WeightStore {
 public:
  // Throws LoadError naming the directory or file when no checkpoint is found, the index is
  // invalid, a shard is missing, or a file is corrupt (see SafetensorsFile::open).
  // With options.format == Dummy: dummy(model_dir, options.dummy_keep_bytes).
  static WeightStore open(const std::string& model_dir, const WeightLoadOptions& options = {});
  // A store that makes every tensor on request (DummyWeights) in the dtype of DIR/config.json
  // (torch_dtype / dtype, at the top or in text_config; bfloat16 when absent). Throws LoadError
  // naming DIR/config.json when it is missing, not JSON, or names an unknown dtype. A dummy
  // store has() no tensor, first_prefix() answers the first prefix, it is never FP8, and
  // tensors() / total_bytes() are the tensors it holds now.
  static WeightStore dummy(const std::string& model_dir, int64_t keep_bytes = -1);
  // The dummy store's maker (null for a checkpoint's store).
  const DummyWeights* dummy_weights() const { return dummy_.get(); }
  // A dummy store in the streaming form: views may be dropped (CPU layers must not be built on it).
  bool streaming() const { return dummy_ && dummy_->keep_bytes() >= 0; }

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // The first of `prefixes` under which the checkpoint holds prefix + probe (a family's weights
  // in either checkpoint layout); throws LoadError "<what>: no tensor (looked for ...)" otherwise.
  std::string first_prefix(std::initializer_list<const char*> prefixes, const std::string& probe,
                           const std::string& what) const;
  // The tensor `name`; throws LoadError naming the checkpoint and tensor when it is missing,
  // its shape differs from `expected`, or its dtype is not a float type (F32/BF16/F16; F8_E4M3
  // in an FP8 checkpoint, returned dequantized to F32).
  TensorView get(const std::string& name, const Shape& expected) const;
  // Rows [r0, r1) x columns [c0, c1) of `name` (expected: the whole tensor's shape, read as
  // [N, rest]; the same checks as get()). A dummy store makes only that block
  // (DummyWeights::get_slice: each rank of a tensor-parallel load makes its part, the load each
  // tensor once); a checkpoint's rows are a view of get() (nothing read beyond them). Precondition
  // for a checkpoint: all columns (c0 == 0, c1 == rest; its column slices are copies, made by
  // ShardedWeightSource).
  TensorView get_slice(const std::string& name, const Shape& expected, int64_t r0, int64_t r1, int64_t c0,
                       int64_t c1) const;
  const WeightQuantization& quantization() const { return quant_; }
  // Whether `name` is an FP8 weight of an FP8 checkpoint.
  bool is_fp8(const std::string& name) const;
  // The FP8 weight `name` [N, K] and its scales (shape and dtype checked; LoadError naming the
  // tensor otherwise). Precondition: is_fp8(name).
  Fp8Weight fp8(const std::string& name, const Shape& expected) const;
  const std::map<std::string, TensorView>& tensors() const { return dummy_ ? dummy_->held() : tensors_; }
  // Sum of the tensors' bytes.
  int64_t total_bytes() const;

 private:
  std::string dir_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> file_of_;  // tensor name -> file name, for messages
  WeightQuantization quant_;
  struct Dequantized {  // FP8 weights get() dequantized, by name (the store is moved: held by pointer)
    std::mutex mu;
    std::map<std::string, Tensor> tensors;
  };
  std::shared_ptr<Dequantized> dequantized_ = std::make_shared<Dequantized>();
  std::shared_ptr<DummyWeights> dummy_;  // --load-format dummy (shared by copies of the store)
};

}  // namespace vlm

// All tensors of a Hugging Face checkpoint directory, by checkpoint name. Reads either one
// `model.safetensors` or the shards listed in `model.safetensors.index.json` (weight_map).
// Weights stay memory-mapped in their stored dtype; views are valid while the store lives.
#pragma once

#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/core/tensor.h"
#include "model/decoder/safetensors.h"

namespace vlm {

class WeightStore {
 public:
  // Throws LoadError naming the directory or file when no checkpoint is found, the index is
  // invalid, a shard is missing, or a file is corrupt (see SafetensorsFile::open).
  static WeightStore open(const std::string& model_dir);

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // The first of `prefixes` under which the checkpoint holds prefix + probe (a family's weights
  // in either checkpoint layout); throws LoadError "<what>: no tensor (looked for ...)" otherwise.
  std::string first_prefix(std::initializer_list<const char*> prefixes, const std::string& probe,
                           const std::string& what) const;
  // The tensor `name`; throws LoadError naming the checkpoint and tensor when it is missing,
  // its shape differs from `expected`, or its dtype is not a float type (F32/BF16/F16).
  TensorView get(const std::string& name, const Shape& expected) const;
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  // Sum of the tensors' bytes.
  int64_t total_bytes() const;

 private:
  std::string dir_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> file_of_;  // tensor name -> file name, for messages
};

}  // namespace vlm

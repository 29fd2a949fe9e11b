#include "model/decoder/weights.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "kernels/core/fp8.h"
#include "model/decoder/json_file.h"

namespace vlm {

std::optional<LoadFormat> parse_load_format(std::string_view s) {
  if (s == "auto") return LoadFormat::Auto;
  if (s == "safetensors") return LoadFormat::Safetensors;
  if (s == "dummy") return LoadFormat::Dummy;
  return std::nullopt;
}

WeightStore WeightStore::dummy(const std::string& model_dir, int64_t keep_bytes) {
  const std::string path = model_dir + "/config.json";
  const nlohmann::json j = read_json_file(path);  // LoadError naming the file
  if (!j.is_object()) throw LoadError(path + ": not a JSON object (--load-format dummy makes the weights from it)");
  auto dtype_field = [](const nlohmann::json& o) -> std::optional<std::string> {
    for (const char* k : {"dtype", "torch_dtype"})
      if (o.contains(k) && o[k].is_string()) return o[k].get<std::string>();
    return std::nullopt;
  };
  std::optional<std::string> name = dtype_field(j);
  if (!name && j.contains("text_config") && j["text_config"].is_object()) name = dtype_field(j["text_config"]);
  DType dt = DType::BF16;
  if (name && !parse_float_dtype_name(*name, &dt))
    throw LoadError(path + ": unknown dtype '" + *name + "' (--load-format dummy makes the weights in it)");
  WeightStore w;
  w.dir_ = model_dir;
  w.dummy_ = std::make_shared<DummyWeights>(model_dir, dt, keep_bytes);
  return w;
}

WeightStore WeightStore::open(const std::string& model_dir, const WeightLoadOptions& options) {
  if (options.format == LoadFormat::Dummy) return dummy(model_dir, options.dummy_keep_bytes);
  namespace fs = std::filesystem;
  WeightStore w;
  w.dir_ = model_dir;
  w.quant_ = load_weight_quantization(model_dir);
  std::vector<std::string> shards;
  const std::string single = model_dir + "/model.safetensors";
  const std::string index = model_dir + "/model.safetensors.index.json";
  if (fs::exists(index)) {
    std::ifstream in(index);
    if (!in) throw LoadError(index + ": cannot open");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw LoadError(index + ": invalid JSON: " + e.what());
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      throw LoadError(index + ": no 'weight_map' object");
    std::map<std::string, std::string> expected_file;
    for (const auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string()) throw LoadError(index + ": weight_map['" + name + "'] is not a file name");
      std::string f = file.get<std::string>();
      if (f.find('/') != std::string::npos || f.find("..") != std::string::npos)
        throw LoadError(index + ": weight_map['" + name + "'] names a file outside the directory: " + f);
      expected_file[name] = f;
      if (std::find(shards.begin(), shards.end(), f) == shards.end()) shards.push_back(f);
    }
    for (const auto& f : shards) {
      std::string path = model_dir + "/" + f;
      if (!fs::exists(path)) throw LoadError(path + ": shard listed in " + index + " is missing");
      std::shared_ptr<SafetensorsFile> sf = SafetensorsFile::open(path);
      for (const auto& [name, view] : sf->tensors()) {
        w.tensors_[name] = view;
        w.file_of_[name] = path;
      }
      w.files_.push_back(std::move(sf));
    }
    for (const auto& [name, f] : expected_file)
      if (!w.tensors_.count(name))
        throw LoadError(model_dir + "/" + f + ": tensor '" + name + "' listed in " + index +
                        " is not in the file");
  } else if (fs::exists(single)) {
    std::shared_ptr<SafetensorsFile> sf = SafetensorsFile::open(single);
    for (const auto& [name, view] : sf->tensors()) {
      w.tensors_[name] = view;
      w.file_of_[name] = single;
    }
    w.files_.push_back(std::move(sf));
  } else {
    throw LoadError(model_dir + ": no model.safetensors or model.safetensors.index.json");
  }
  return w;
}

std::string WeightStore::first_prefix(std::initializer_list<const char*> prefixes, const std::string& probe,
                                      const std::string& what) const {
  if (dummy_) return *prefixes.begin();  // every name is made on request
  for (const char* p : prefixes)
    if (has(std::string(p) + probe)) return p;
  std::string tried;
  for (const char* p : prefixes) tried += std::string(tried.empty() ? "" : ", ") + p + probe;
  throw LoadError(what + ": no tensor (looked for " + tried + ")");
}

TensorView WeightStore::get_slice(const std::string& name, const Shape& expected, int64_t r0, int64_t r1, int64_t c0,
                                  int64_t c1) const {
  if (dummy_) return dummy_->get_slice(name, expected, r0, r1, c0, c1);
  const TensorView t = get(name, expected);
  const int64_t N = expected[0], K = expected.numel() / std::max<int64_t>(N, 1);
  VLM_CHECK(c0 == 0 && c1 == K, "columns [{}, {}) of checkpoint tensor {} ({} columns): a copy's work", c0, c1, name, K);
  VLM_CHECK(0 <= r0 && r0 < r1 && r1 <= N, "rows [{}, {}) of {} ({} rows)", r0, r1, name, N);
  const auto elt = static_cast<int64_t>(dtype_size(t.dtype));
  return TensorView(static_cast<char*>(t.data) + r0 * K * elt, t.dtype, {r1 - r0, K});
}

TensorView WeightStore::get(const std::string& name, const Shape& expected) const {
  if (dummy_) return dummy_->get(name, expected);
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw LoadError(dir_ + ": missing tensor '" + name + "'");
  const TensorView& t = it->second;
  const std::string& file = file_of_.at(name);
  if (t.dtype == DType::F8_E4M3 && quant_.scales != Fp8Scales::None) {
    const Fp8Weight f = fp8(name, expected);
    std::lock_guard<std::mutex> lock(dequantized_->mu);
    auto [d, fresh] = dequantized_->tensors.try_emplace(name);
    if (fresh) {
      const int64_t N = expected[0], K = expected.numel() / std::max<int64_t>(N, 1);
      d->second = Tensor::empty(expected, DType::F32);
      const auto* q = static_cast<const uint8_t*>(f.q.data);
      if (f.scales == Fp8Scales::Block)
        dequantize_fp8_blocks(q, f.scale.as<float>(), f.block_n, f.block_k, N, K, d->second.as<float>());
      else
        dequantize_fp8_rows(q, f.scale.as<float>(), N, K, d->second.as<float>());
    }
    return d->second.view();
  }
  if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16)
    throw LoadError(file + ": tensor '" + name + "' has dtype " + dtype_name(t.dtype) +
                    ", expected F32, BF16 or F16");
  if (!(t.shape == expected))
    throw LoadError(file + ": tensor '" + name + "' has shape " + t.shape.str() + ", expected " +
                    expected.str());
  return t;
}

bool WeightStore::is_fp8(const std::string& name) const {
  auto it = tensors_.find(name);
  return quant_.scales != Fp8Scales::None && it != tensors_.end() && it->second.dtype == DType::F8_E4M3;
}

Fp8Weight WeightStore::fp8(const std::string& name, const Shape& expected) const {
  VLM_CHECK(is_fp8(name), "{}: '{}' is not an FP8 weight", dir_, name);
  const TensorView& t = tensors_.at(name);
  const std::string& file = file_of_.at(name);
  if (!(t.shape == expected) || t.ndim() != 2)
    throw LoadError(file + ": FP8 tensor '" + name + "' has shape " + t.shape.str() + ", expected " + expected.str() +
                    " (FP8 weights are matrices)");
  const int64_t N = t.dim(0), K = t.dim(1);
  const std::string sname = name + quant_.scale_suffix;
  auto it = tensors_.find(sname);
  if (it == tensors_.end()) throw LoadError(dir_ + ": FP8 tensor '" + name + "' without its scales '" + sname + "'");
  const TensorView& s = it->second;
  Shape want;
  if (quant_.scales == Fp8Scales::Block) {
    want = Shape{(N + quant_.block_n - 1) / quant_.block_n, (K + quant_.block_k - 1) / quant_.block_k};
  } else {
    want = s.ndim() == 1 ? Shape{N} : Shape{N, 1};
  }
  if (!(s.shape == want))
    throw LoadError(file_of_.at(sname) + ": scales '" + sname + "' have shape " + s.shape.str() + ", expected " +
                    want.str() + " for " + quant_.describe());
  if (s.dtype != DType::F32 && s.dtype != DType::BF16 && s.dtype != DType::F16)
    throw LoadError(file_of_.at(sname) + ": scales '" + sname + "' have dtype " + dtype_name(s.dtype) +
                    ", expected F32, BF16 or F16");
  Fp8Weight f;
  f.q = t;
  f.scales = quant_.scales;
  f.block_n = quant_.block_n;
  f.block_k = quant_.block_k;
  f.scale = Tensor::empty(quant_.scales == Fp8Scales::Block ? want : Shape{N}, DType::F32);
  convert_to_f32(s.data, s.dtype, f.scale.as<float>(), s.numel());
  return f;
}

int64_t WeightStore::total_bytes() const {
  if (dummy_) return dummy_->bytes_held();
  int64_t n = 0;
  for (const auto& [name, t] : tensors_) n += t.nbytes();
  return n;
}

}  // namespace vlm

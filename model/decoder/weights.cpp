#include "model/decoder/weights.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace vlm {

WeightStore WeightStore::open(const std::string& model_dir) {
  namespace fs = std::filesystem;
  WeightStore w;
  w.dir_ = model_dir;
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
  for (const char* p : prefixes)
    if (has(std::string(p) + probe)) return p;
  std::string tried;
  for (const char* p : prefixes) tried += std::string(tried.empty() ? "" : ", ") + p + probe;
  throw LoadError(what + ": no tensor (looked for " + tried + ")");
}

TensorView WeightStore::get(const std::string& name, const Shape& expected) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw LoadError(dir_ + ": missing tensor '" + name + "'");
  const TensorView& t = it->second;
  const std::string& file = file_of_.at(name);
  if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16)
    throw LoadError(file + ": tensor '" + name + "' has dtype " + dtype_name(t.dtype) +
                    ", expected F32, BF16 or F16");
  if (!(t.shape == expected))
    throw LoadError(file + ": tensor '" + name + "' has shape " + t.shape.str() + ", expected " +
                    expected.str());
  return t;
}

int64_t WeightStore::total_bytes() const {
  int64_t n = 0;
  for (const auto& [name, t] : tensors_) n += t.nbytes();
  return n;
}

}  // namespace vlm

#include "model/tokenizer/tokenizer_json.h"
#include "model/decoder/json_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"

namespace vlm {
namespace {

using nlohmann::json;

json read_json(const std::string& path) { return read_json_file(path); }

AddedToken parse_added_token(const json& j, int32_t id, const std::string& source) {
  if (!j.is_object() || !j.contains("content") || !j["content"].is_string())
    throw LoadError(source + ": added token " + j.dump() + " has no string 'content'");
  AddedToken t;
  t.id = id;
  t.content = j["content"].get<std::string>();
  t.special = j.value("special", false);
  t.single_word = j.value("single_word", false);
  t.lstrip = j.value("lstrip", false);
  t.rstrip = j.value("rstrip", false);
  t.normalized = j.value("normalized", !t.special);
  return t;
}

// bos_token / eos_token: "text", {"content": "text", ...} or null.
std::string token_string(const json& config, const char* key, const std::string& source) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  throw LoadError(source + ": '" + key + "' must be a string, an object with 'content', or null");
}

}  // namespace

TokenizerParts parse_tokenizer_parts(const json& tok, const json* config, const std::string& source,
                                     const std::string& config_source) {
  if (!tok.is_object()) throw LoadError(source + ": not a JSON object");
  TokenizerParts p;
  p.normalizer = Normalizer::from_json(tok.value("normalizer", json()), source);
  p.pre_tokenizer = PreTokenizer::from_json(tok.value("pre_tokenizer", json()), source);
  p.model = BpeModel::from_json(tok.value("model", json()), source);
  p.post_processor = PostProcessor::from_json(tok.value("post_processor", json()), source);
  p.decoder = TokenDecoder::from_json(tok.value("decoder", json()), source);

  if (auto it = tok.find("added_tokens"); it != tok.end() && !it->is_null()) {
    if (!it->is_array()) throw LoadError(source + ": 'added_tokens' must be an array");
    for (const json& t : *it) {
      if (!t.contains("id") || !t["id"].is_number_integer() || t["id"].get<int64_t>() < 0)
        throw LoadError(source + ": added token " + t.dump() + " has no valid 'id'");
      p.added.add(parse_added_token(t, t["id"].get<int32_t>(), source));
    }
  }

  if (config) {
    if (!config->is_object()) throw LoadError(config_source + ": not a JSON object");
    if (auto it = config->find("added_tokens_decoder"); it != config->end() && it->is_object()) {
      for (const auto& [key, t] : it->items()) {
        int32_t id = -1;
        try {
          id = std::stoi(key);
        } catch (const std::exception&) {
        }
        if (id < 0) throw LoadError(config_source + ": added_tokens_decoder key '" + key + "' is not an id");
        if (!p.added.find(id)) p.added.add(parse_added_token(t, id, config_source));
      }
    }
    p.bos_token = token_string(*config, "bos_token", config_source);
    p.eos_token = token_string(*config, "eos_token", config_source);
  }
  p.added.build(p.normalizer.get());

  if (config && (config->contains("add_bos_token") || config->contains("add_eos_token"))) {
    auto flag = [&](const char* key) {
      auto it = config->find(key);
      if (it == config->end() || it->is_null()) return false;
      if (!it->is_boolean()) throw LoadError(config_source + ": '" + key + "' must be a boolean");
      return it->get<bool>();
    };
    auto id_of = [&](const std::string& token, const char* what) {
      if (token.empty()) throw LoadError(config_source + ": " + what + " is set but there is no token for it");
      if (auto id = p.added.token_to_id(token)) return *id;
      if (auto id = p.model->token_to_id(token)) return *id;
      throw LoadError(config_source + ": token '" + token + "' for " + what + " is not in the vocabulary");
    };
    std::vector<int32_t> prefix, suffix;
    if (flag("add_bos_token")) prefix.push_back(id_of(p.bos_token, "add_bos_token"));
    if (flag("add_eos_token")) suffix.push_back(id_of(p.eos_token, "add_eos_token"));
    p.post_processor = PostProcessor::wrap(std::move(prefix), std::move(suffix));
  }
  return p;
}

TokenizerParts load_tokenizer_parts(const std::string& model_dir) {
  const std::string path = model_dir + "/tokenizer.json";
  const std::string config_path = model_dir + "/tokenizer_config.json";
  const json tok = read_json(path);
  if (std::filesystem::exists(config_path)) {
    const json config = read_json(config_path);
    return parse_tokenizer_parts(tok, &config, path, config_path);
  }
  return parse_tokenizer_parts(tok, nullptr, path, config_path);
}

}  // namespace vlm

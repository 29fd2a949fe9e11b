// Reading the JSON files of a checkpoint directory (config.json, preprocessor_config.json, ...)
// with load errors that name the file.
#pragma once

#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"

namespace vlm {

// The parsed file. Throws LoadError "PATH: cannot open" or "PATH: invalid JSON: ...".
nlohmann::json read_json_file(const std::string& path);

// parse(json, path) on the file's content; a JSON type error inside parse (a field of the wrong
// type) becomes a LoadError naming the file. parse's own LoadErrors pass through.
template <typename Parse>
auto parse_json_file(const std::string& path, Parse&& parse) {
  const nlohmann::json j = read_json_file(path);
  try {
    return std::forward<Parse>(parse)(j, path);
  } catch (const nlohmann::json::exception& e) {
    throw LoadError(path + ": " + e.what());
  }
}

}  // namespace vlm

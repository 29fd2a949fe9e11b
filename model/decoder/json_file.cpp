#include "model/decoder/json_file.h"

#include <fstream>
#include <sstream>

namespace vlm {

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw LoadError(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    throw LoadError(path + ": invalid JSON: " + e.what());
  }
}

}  // namespace vlm

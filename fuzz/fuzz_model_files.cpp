// Fuzzes the model-file parsers (operator input, but a downloaded checkpoint is not trusted to
// be well formed): the first byte picks
//  - 0..127: a safetensors file (8-byte header length, JSON header, data), written to a
//    temporary file and opened by SafetensorsFile (mmap + header validation); every tensor it
//    accepts must lie inside the file;
//  - 128..255: a config.json read by ModelConfig::load.
// Both must fail only with LoadError.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "fuzz/fuzz_util.h"
#include "model/decoder/model_config.h"
#include "model/decoder/safetensors.h"

namespace {
const std::string& temp_path() {
  static const std::string p = "/tmp/vlm_fuzz_model_files_" + std::to_string(getpid()) + ".safetensors";
  return p;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const char* rest = reinterpret_cast<const char*>(data + 1);
  if (data[0] < 128) {
    FILE* f = std::fopen(temp_path().c_str(), "wb");
    if (!f) std::abort();
    if (size > 1) std::fwrite(rest, 1, size - 1, f);
    std::fclose(f);
    vlm::fuzz::run_expecting_clean_errors([&] {
      auto file = vlm::SafetensorsFile::open(temp_path());
      for (const auto& [name, t] : file->tensors()) {
        (void)name;
        // Touch the first and last byte of each tensor: ASan and the mapping catch a view
        // that points outside the file.
        if (t.nbytes() > 0) {
          const auto* p = static_cast<const volatile char*>(t.data);
          (void)p[0];
          (void)p[t.nbytes() - 1];
        }
      }
    });
  } else {
    // Through ModelConfig::load, as the server reads it (JSON type errors become LoadError).
    static const std::string dir = temp_path() + ".d";
    static const bool made = std::filesystem::create_directories(dir) || true;
    (void)made;
    FILE* f = std::fopen((dir + "/config.json").c_str(), "wb");
    if (!f) std::abort();
    if (size > 1) std::fwrite(rest, 1, size - 1, f);
    std::fclose(f);
    vlm::fuzz::run_expecting_clean_errors([&] { vlm::ModelConfig::load(dir); });
  }
  return 0;
}

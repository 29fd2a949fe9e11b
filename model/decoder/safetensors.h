// Read-only, memory-mapped safetensors file. Format: an 8-byte little-endian header length N, a
// JSON header of N bytes mapping tensor names to {dtype, shape, data_offsets: [begin, end)}
// (offsets relative to the first byte after the header), then the data.
// Tensors are views into the mapping: they stay valid while the SafetensorsFile lives.
// Files of at least kHugePageCopyBytes are copied once into anonymous memory advised for
// transparent huge pages (2 MiB pages: a decode step streams every weight, and 4 KiB pages cost
// a TLB walk per 4 KiB); VLM_WEIGHTS_MMAP=1 in the environment keeps the plain file mapping.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "kernels/core/tensor.h"

namespace vlm {

class SafetensorsFile {
 public:
  // Maps `path` and validates the header. Throws LoadError naming the file (and the tensor,
  // when one is at fault) for: unreadable file, truncated file, header length past the end,
  // invalid JSON, unknown dtype, more than 4 dims, offsets outside the data or not matching
  // the shape's byte size.
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  size_t size_bytes() const { return size_; }
  static constexpr size_t kHugePageCopyBytes = size_t{64} << 20;

 private:
  SafetensorsFile() = default;
  static void copy_to_huge_pages(SafetensorsFile& f);
  std::string path_;
  void* map_ = nullptr;      // the file's bytes (file mapping, or inside the anonymous copy)
  size_t size_ = 0;
  void* unmap_ = nullptr;    // what the destructor unmaps, and its length
  size_t unmap_len_ = 0;
  std::map<std::string, TensorView> tensors_;
};

}  // namespace vlm

namespace vlm {

// Writes `tensors` (name -> view) to `path` in the safetensors format, data 8-byte aligned, in
// name order. Throws LoadError naming the file when it cannot be written.
void write_safetensors(const std::string& path, const std::map<std::string, TensorView>& tensors);

}  // namespace vlm

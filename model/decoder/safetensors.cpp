#include "model/decoder/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>
#include <nlohmann/json.hpp>

namespace vlm {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw LoadError(path + ": " + what);
}

}  // namespace

// Replaces the file mapping by a copy in 2 MiB-aligned anonymous memory advised for
// transparent huge pages; keeps the file mapping when that memory cannot be had.
void SafetensorsFile::copy_to_huge_pages(SafetensorsFile& f) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t len = (f.size_ + kHuge - 1) / kHuge * kHuge + kHuge;
  void* a = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (a == MAP_FAILED) return;
  auto* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(a) + kHuge - 1) / kHuge * kHuge);
  ::madvise(base, len - kHuge, MADV_HUGEPAGE);  // advice only: the copy works without it
  std::memcpy(base, f.map_, f.size_);
  ::mprotect(a, len, PROT_READ);
  ::munmap(f.map_, f.size_);
  f.map_ = base;
  f.unmap_ = a;
  f.unmap_len_ = len;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail(path, std::string("cannot stat: ") + std::strerror(err));
  }
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ < 8) {
    ::close(fd);
    fail(path, "truncated safetensors file (" + std::to_string(f->size_) + " bytes, no header)");
  }
  void* m = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_err = errno;
  ::close(fd);
  if (m == MAP_FAILED) fail(path, std::string("mmap failed: ") + std::strerror(map_err));
  f->map_ = m;
  f->unmap_ = m;
  f->unmap_len_ = f->size_;
  if (f->size_ >= kHugePageCopyBytes && !std::getenv("VLM_WEIGHTS_MMAP")) copy_to_huge_pages(*f);

  const auto* bytes = static_cast<const unsigned char*>(f->map_);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > f->size_ - 8)
    fail(path, "truncated safetensors file: header of " + std::to_string(header_len) +
                   " bytes but the file has " + std::to_string(f->size_));
  const size_t data_begin = 8 + header_len;
  const size_t data_size = f->size_ - data_begin;

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + data_begin);
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("invalid safetensors header JSON: ") + e.what());
  }
  if (!header.is_object()) fail(path, "safetensors header is not a JSON object");

  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string& tensor = name;  // clang 14 cannot capture a structured binding
    auto bad = [&](const std::string& what) { fail(path, "tensor '" + tensor + "': " + what); };
    if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") ||
        !info.contains("data_offsets"))
      bad("entry needs dtype, shape and data_offsets");
    DType dtype;
    std::string dtype_str = info["dtype"].is_string() ? info["dtype"].get<std::string>() : "?";
    if (!parse_dtype(dtype_str, &dtype)) bad("unknown dtype '" + dtype_str + "'");
    const auto& shape_j = info["shape"];
    if (!shape_j.is_array() || shape_j.size() > kMaxDims)
      bad("shape must be an array of at most " + std::to_string(kMaxDims) + " dims");
    Shape shape;
    for (const auto& d : shape_j) {
      if (!d.is_number_unsigned()) bad("shape entries must be non-negative integers");
      shape.dims[shape.ndim++] = d.get<int64_t>();
    }
    const auto& off = info["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      bad("data_offsets must be two non-negative integers");
    uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > data_size)
      bad("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
          ") outside the data section of " + std::to_string(data_size) + " bytes (truncated file?)");
    uint64_t want = static_cast<uint64_t>(shape.numel()) * dtype_size(dtype);
    if (end - begin != want)
      bad("shape " + shape.str() + " of " + dtype_str + " needs " + std::to_string(want) +
          " bytes, data_offsets give " + std::to_string(end - begin));
    void* data = const_cast<unsigned char*>(bytes + data_begin + begin);
    f->tensors_.emplace(name, TensorView(data, dtype, shape));
  }
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (unmap_) ::munmap(unmap_, unmap_len_);
}

}  // namespace vlm

namespace vlm {

void write_safetensors(const std::string& path, const std::map<std::string, TensorView>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    std::vector<int64_t> shape(t.shape.dims.begin(), t.shape.dims.begin() + t.shape.ndim);
    const auto bytes = static_cast<uint64_t>(t.nbytes());
    header[name] = {{"dtype", dtype_name(t.dtype)}, {"shape", shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  h.resize((h.size() + 8 + 7) / 8 * 8 - 8, ' ');  // pad so the data starts 8-byte aligned
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw LoadError(path + ": cannot open for writing");
  char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((static_cast<uint64_t>(h.size()) >> (8 * i)) & 0xff);
  out.write(len, 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& [name, t] : tensors) out.write(static_cast<const char*>(t.data), t.nbytes());
  if (!out) throw LoadError(path + ": write failed");
}

}  // namespace vlm

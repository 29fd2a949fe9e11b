// BenchDump: the `--dump-logits` / `--dump` file of the GPU benchmarks (bench_cuda_decoder,
// bench_cuda_vision): raw little-endian f32 values appended record after record, no header, so
// two binaries run with the same flags give files that `cmp` compares bit for bit (issue 39,
// docs/WRITTEN_ONCE.md step 0). Each record prints one line to stdout,
//   dump <what>: <rows> x <cols> f32 at byte <offset>, fnv1a64 <16 hex digits>
// which maps the byte offset `cmp` reports back to a record, a row and a column; the hash (FNV-1a
// over the record's bytes) lets two logs be compared record by record where the files cannot
// travel (the device tool returns files of at most 16 MiB).
// Callers append only outside their timed regions.
#pragma once

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace vlm::bench {

class BenchDump {
 public:
  BenchDump() = default;  // no file: append() does nothing
  // Opens (truncates) `path`; an empty path means no dump. Throws std::runtime_error when the
  // file cannot be opened (before any GPU work, so a bad path fails at once).
  explicit BenchDump(const std::string& path) : path_(path) {
    if (path.empty()) return;
    f_ = std::fopen(path.c_str(), "wb");
    if (!f_) throw std::runtime_error("cannot open dump file '" + path + "'");
  }
  BenchDump(const BenchDump&) = delete;
  BenchDump& operator=(const BenchDump&) = delete;
  ~BenchDump() {
    if (f_) std::fclose(f_);
  }

  bool enabled() const { return f_ != nullptr; }

  // Appends host values [rows, cols] (f32, little-endian: the x86-64 / aarch64 host order) and
  // prints the record line. Throws std::runtime_error on a short write.
  void append(const std::string& what, const float* values, int64_t rows, int64_t cols) {
    if (!f_) return;
    const auto n = static_cast<size_t>(rows * cols);
    if (std::fwrite(values, 4, n, f_) != n || std::fflush(f_) != 0)
      throw std::runtime_error("short write to dump file '" + path_ + "'");
    uint64_t h = 14695981039346656037ULL;
    const auto* b = reinterpret_cast<const unsigned char*>(values);
    for (size_t i = 0; i < n * 4; ++i) h = (h ^ b[i]) * 1099511628211ULL;
    std::printf("dump %s: %lld x %lld f32 at byte %lld, fnv1a64 %016llx\n", what.c_str(), static_cast<long long>(rows),
                static_cast<long long>(cols), static_cast<long long>(offset_), static_cast<unsigned long long>(h));
    std::fflush(stdout);
    offset_ += static_cast<int64_t>(n) * 4;
  }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  int64_t offset_ = 0;
};

}  // namespace vlm::bench

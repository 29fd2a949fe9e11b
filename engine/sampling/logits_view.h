// LogitsView: one sequence's logits row as the Sampler sees it, without a copy of the row: the
// model's row (read only: the choices of an n > 1 request sample the same row, each with its own
// penalties) and the few entries that penalties, logit_bias and min_tokens changed, as patches
// sorted by token id. Reading a range gives the row itself where no patch falls inside it, else a
// caller-provided scratch copy with the patches applied.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

namespace vlm {

struct LogitPatch {
  int32_t id = 0;
  float value = 0;
};

class LogitsView {
 public:
  // row: [size] logits; patches sorted by id, ids distinct and in [0, size).
  LogitsView(const float* row, int64_t size, std::span<const LogitPatch> patches)
      : row_(row), size_(size), patches_(patches) {}

  const float* row() const { return row_; }
  int64_t size() const { return size_; }
  std::span<const LogitPatch> patches() const { return patches_; }

  // Entries [begin, end): row() + begin when no patch is among them, else scratch (end - begin
  // floats) filled with them, patched.
  const float* range(int64_t begin, int64_t end, float* scratch) const {
    auto it = first_patch_at_or_after(begin);
    if (it == patches_.end() || it->id >= end) return row_ + begin;
    std::copy(row_ + begin, row_ + end, scratch);
    for (; it != patches_.end() && it->id < end; ++it) scratch[it->id - begin] = it->value;
    return scratch;
  }

 private:
  std::span<const LogitPatch>::iterator first_patch_at_or_after(int64_t i) const {
    return std::lower_bound(patches_.begin(), patches_.end(), i,
                            [](const LogitPatch& p, int64_t id) { return p.id < id; });
  }

  const float* row_;
  int64_t size_;
  std::span<const LogitPatch> patches_;
};

}  // namespace vlm

// Data-parallel media encoding (issue 42, vLLM's --mm-encoder-tp-mode data): which device encodes
// which of a call's units (the tower calls the one-device encoder would make: Qwen2-VL's groups
// of whole frames, or whole items), host logic only so the CPU tests check it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace vlm {

// Splits units of costs[i] (>= 0: encoder rows, i.e. patches) into n contiguous runs, one per
// device: device d takes units [b[d], b[d + 1]) of the returned b (n + 1 entries, b[0] = 0,
// b[n] = costs.size(), non-decreasing), so its rows are one range of the call's (one gather copy
// per device). Cut d sits at the unit boundary whose running cost is nearest d * total / n (the
// earlier on a tie, never before cut d - 1), so a run's cost differs from the even share by at
// most about one unit's cost. Deterministic (the same costs give the same cuts); a device may get
// no unit (fewer units than devices). n >= 1.
std::vector<size_t> split_units_over_devices(std::span<const int64_t> costs, int n);

}  // namespace vlm

#include "model/decoder/dummy_weights.h"

#include <array>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "kernels/core/check.h"
#include "kernels/core/dtype.h"
#include "kernels/core/thread_pool.h"

namespace vlm {

namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

uint64_t mix64(uint64_t z) {  // splitmix64's finalizer
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t name_seed(const std::string& name) {
  uint64_t h = 14695981039346656037ULL;  // FNV-1a 64
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ULL;
  return mix64(h + kGolden);
}

bool ends_with(const std::string& s, const char* suffix) {
  const std::string t(suffix);
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

enum class Kind { Weight, Bias, NormScale };

Kind kind_of(const std::string& name) {
  if (ends_with(name, ".bias")) return Kind::Bias;
  if (!ends_with(name, ".weight")) return Kind::Weight;
  const std::string stem = name.substr(0, name.size() - 7);  // without ".weight"
  const size_t dot = stem.rfind('.');
  const std::string last = dot == std::string::npos ? stem : stem.substr(dot + 1);  // e.g. input_layernorm, ln_q
  if (last.find("norm") != std::string::npos || last.rfind("ln_", 0) == 0) return Kind::NormScale;
  return Kind::Weight;
}

// The value of 16 random bits r for a kind: offset + (r - 32767.5) / 32767.5 * a.
float value(Kind k, uint32_t r) {
  const float u = (static_cast<float>(r) - 32767.5f) / 32767.5f;
  switch (k) {
    case Kind::Bias: return 0.002f * u;
    case Kind::NormScale: return 1.0f;
    case Kind::Weight: break;
  }
  return 0.034641016f * u;  // 0.02 * sqrt(3)
}

// bf16 of value(k, r) for every r (one table per kind, made once).
const std::vector<uint16_t>& bf16_table(Kind k) {
  static const std::array<std::vector<uint16_t>, 3> tables = [] {
    std::array<std::vector<uint16_t>, 3> t;
    for (int i = 0; i < 3; ++i) {
      t[static_cast<size_t>(i)].resize(65536);
      for (uint32_t r = 0; r < 65536; ++r) t[static_cast<size_t>(i)][r] = f32_to_bf16(value(static_cast<Kind>(i), r));
    }
    return t;
  }();
  return tables[static_cast<size_t>(k)];
}

uint64_t draw_at(uint64_t seed, int64_t g) { return mix64(seed + static_cast<uint64_t>(g + 1) * kGolden); }

// Elements [begin, begin + n) of a tensor (global indices) into out[0, n), element i's 16 bits
// the (i % 4)-th of draw_at(i / 4): what fill() writes at those indices.
template <class T, class Convert>
void fill_range(uint64_t seed, T* out, int64_t begin, int64_t n, Convert convert) {
  int64_t g = -1;
  uint64_t r = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t idx = begin + i;
    if ((idx >> 2) != g) {
      g = idx >> 2;
      r = draw_at(seed, g);
    }
    out[i] = convert(static_cast<uint32_t>(r >> (16 * (idx & 3))) & 0xFFFFu);
  }
}

}  // namespace

DummyWeights::DummyWeights(std::string model_dir, DType dtype, int64_t keep_bytes)
    : dir_(std::move(model_dir)), dtype_(dtype), keep_bytes_(keep_bytes) {
  VLM_CHECK(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16, "dummy weights in {}",
            dtype_name(dtype));
}

void DummyWeights::fill(const std::string& name, const TensorView& out) {
  VLM_CHECK(out.dtype == DType::F32 || out.dtype == DType::BF16 || out.dtype == DType::F16, "dummy {} in {}", name,
            dtype_name(out.dtype));
  const Kind k = kind_of(name);
  const uint64_t seed = name_seed(name);
  const int64_t n = out.numel(), groups = (n + 3) / 4;  // 4 values per 64-bit draw
  const uint16_t* tbl = bf16_table(k).data();
  const int64_t full = n / 4;  // groups of 4 values; the last, partial one apart
  auto draw = [seed](int64_t g) { return mix64(seed + static_cast<uint64_t>(g + 1) * kGolden); };
  auto body = [&](int64_t g0, int64_t g1) {
    const int64_t g_end = std::min(g1, full);
    if (out.dtype == DType::BF16) {  // 4 table lookups a draw, written as one 64-bit word
      auto* o = static_cast<uint16_t*>(out.data);
      for (int64_t g = g0; g < g_end; ++g) {
        const uint64_t r = draw(g);
        const uint64_t w = static_cast<uint64_t>(tbl[r & 0xFFFF]) | static_cast<uint64_t>(tbl[(r >> 16) & 0xFFFF]) << 16 |
                           static_cast<uint64_t>(tbl[(r >> 32) & 0xFFFF]) << 32 |
                           static_cast<uint64_t>(tbl[r >> 48]) << 48;
        std::memcpy(o + 4 * g, &w, 8);
      }
    } else if (out.dtype == DType::F32) {
      auto* o = static_cast<float*>(out.data);
      for (int64_t g = g0; g < g_end; ++g) {
        const uint64_t r = draw(g);
        for (int j = 0; j < 4; ++j) o[4 * g + j] = value(k, static_cast<uint32_t>(r >> (16 * j)) & 0xFFFFu);
      }
    } else {
      auto* o = static_cast<uint16_t*>(out.data);
      for (int64_t g = g0; g < g_end; ++g) {
        const uint64_t r = draw(g);
        for (int j = 0; j < 4; ++j) o[4 * g + j] = f32_to_f16(value(k, static_cast<uint32_t>(r >> (16 * j)) & 0xFFFFu));
      }
    }
    if (g1 > full) {  // the partial group: the same values element by element
      const uint64_t r = draw(full);
      for (int64_t i = 4 * full; i < n; ++i) {
        const uint32_t bits = static_cast<uint32_t>(r >> (16 * (i - 4 * full))) & 0xFFFFu;
        if (out.dtype == DType::BF16) static_cast<uint16_t*>(out.data)[i] = tbl[bits];
        else if (out.dtype == DType::F32) static_cast<float*>(out.data)[i] = value(k, bits);
        else static_cast<uint16_t*>(out.data)[i] = f32_to_f16(value(k, bits));
      }
    }
  };
  if (groups < (1 << 16)) body(0, groups);
  else global_thread_pool().parallel_for(groups, body, 1 << 16);
}

void DummyWeights::fill_slice(const std::string& name, int64_t cols, int64_t r0, int64_t c0, const TensorView& out) {
  VLM_CHECK(out.dtype == DType::F32 || out.dtype == DType::BF16 || out.dtype == DType::F16, "dummy {} in {}", name,
            dtype_name(out.dtype));
  const Kind k = kind_of(name);
  const uint64_t seed = name_seed(name);
  const int64_t R = out.shape[0], C = out.numel() / std::max<int64_t>(R, 1);
  VLM_CHECK(c0 >= 0 && c0 + C <= cols, "columns [{}, {}) of {} ({} columns)", c0, c0 + C, name, cols);
  const uint16_t* tbl = bf16_table(k).data();
  auto body = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t begin = (r0 + i) * cols + c0;
      if (out.dtype == DType::BF16)
        fill_range(seed, static_cast<uint16_t*>(out.data) + i * C, begin, C, [tbl](uint32_t b) { return tbl[b]; });
      else if (out.dtype == DType::F32)
        fill_range(seed, static_cast<float*>(out.data) + i * C, begin, C, [k](uint32_t b) { return value(k, b); });
      else
        fill_range(seed, static_cast<uint16_t*>(out.data) + i * C, begin, C,
                   [k](uint32_t b) { return f32_to_f16(value(k, b)); });
    }
  };
  if (R * C < (1 << 18)) body(0, R);
  else global_thread_pool().parallel_for(R, body, std::max<int64_t>(1, (1 << 18) / std::max<int64_t>(C, 1)));
}

void DummyWeights::check_shape_locked(const std::string& name, const Shape& shape) {
  auto s = shapes_.find(name);
  if (s != shapes_.end() && !(s->second == shape))
    throw LoadError(fmt::format("{} (--load-format dummy): tensor '{}' asked for as {} and as {}", dir_, name,
                                s->second.str(), shape.str()));
  if (shape.ndim == 0 || shape.numel() <= 0)
    throw LoadError(fmt::format("{} (--load-format dummy): tensor '{}' of empty shape {}", dir_, name, shape.str()));
  if (s == shapes_.end()) {
    shapes_.emplace(name, shape);
    first_asked_.push_back(name);
  }
}

TensorView DummyWeights::get_slice(const std::string& name, const Shape& full, int64_t r0, int64_t r1, int64_t c0,
                                   int64_t c1) {
  std::lock_guard<std::mutex> lock(mu_);
  check_shape_locked(name, full);
  const int64_t N = full[0], K = full.numel() / N;
  if (!(0 <= r0 && r0 < r1 && r1 <= N && 0 <= c0 && c0 < c1 && c1 <= K))
    throw LoadError(fmt::format("{} (--load-format dummy): rows [{}, {}) x columns [{}, {}) of tensor '{}' {}", dir_, r0,
                                r1, c0, c1, name, full.str()));
  if (r0 == 0 && r1 == N && c0 == 0 && c1 == K)  // the whole tensor: the same key as get()
    return make_locked(name, full, [&](const TensorView& t) { fill(name, t); });
  Shape shape = full;
  shape.dims[0] = r1 - r0;
  if (c0 != 0 || c1 != K) shape = Shape{r1 - r0, c1 - c0};
  const std::string key = fmt::format("{}[{}:{},{}:{}]", name, r0, r1, c0, c1);
  return make_locked(key, shape, [&](const TensorView& t) { fill_slice(name, K, r0, c0, t); });
}

TensorView DummyWeights::get(const std::string& name, const Shape& shape) {
  std::lock_guard<std::mutex> lock(mu_);
  check_shape_locked(name, shape);
  return make_locked(name, shape, [&](const TensorView& t) { fill(name, t); });
}

template <class Fill>
TensorView DummyWeights::make_locked(const std::string& name, const Shape& shape, Fill fill_fn) {
  auto held = views_.find(name);
  if (held != views_.end()) return held->second;
  const int64_t bytes = shape.numel() * static_cast<int64_t>(dtype_size(dtype_));
  Tensor reuse;  // a dropped tensor of the same shape: its pages are written again, not faulted in afresh
  while (keep_bytes_ >= 0 && !order_.empty() && held_bytes_ + bytes > keep_bytes_) {  // drop the oldest
    const std::string old = order_.front();
    order_.pop_front();
    held_bytes_ -= views_.at(old).nbytes();
    views_.erase(old);
    auto node = tensors_.extract(old);
    if (reuse.view().empty() && node.mapped().view().shape == shape) reuse = std::move(node.mapped());
  }
  Tensor t = reuse.view().empty() ? Tensor::empty(shape, dtype_) : std::move(reuse);
  fill_fn(t.view());
  const TensorView v = t.view();
  tensors_.emplace(name, std::move(t));
  views_.emplace(name, v);
  order_.push_back(name);
  held_bytes_ += bytes;
  made_bytes_ += bytes;
  return v;
}

std::vector<std::pair<std::string, Shape>> DummyWeights::made() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<std::string, Shape>> out;
  for (const std::string& n : first_asked_) out.emplace_back(n, shapes_.at(n));
  return out;
}

int64_t DummyWeights::bytes_held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_bytes_;
}

int64_t DummyWeights::bytes_made() const {
  std::lock_guard<std::mutex> lock(mu_);
  return made_bytes_;
}

}  // namespace vlm

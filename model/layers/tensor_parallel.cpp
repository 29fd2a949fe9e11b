#include "model/layers/tensor_parallel.h"

#include <cstring>

#include <fmt/format.h>

#include "kernels/core/check.h"

namespace vlm {

DecoderShard decoder_shard(int64_t H, int64_t Hkv, int64_t I, int64_t V, const TensorParallel& tp) {
  const int64_t N = tp.size, r = tp.rank;
  VLM_CHECK(N >= 1 && r >= 0 && r < N, "rank {} of {}", r, N);
  if (H % N != 0) throw LoadError(fmt::format("tensor parallelism: {} query heads do not split over {} ranks", H, N));
  if (Hkv >= N ? Hkv % N != 0 : N % Hkv != 0)
    throw LoadError(fmt::format("tensor parallelism: {} KV heads do not split over {} ranks (nor are {} ranks a multiple of "
                                "them, to replicate them)", Hkv, N, N));
  if (I % N != 0) throw LoadError(fmt::format("tensor parallelism: an MLP of {} columns does not split over {} ranks", I, N));
  DecoderShard s;
  s.heads = H / N;
  s.head_begin = r * s.heads;
  if (Hkv >= N) {
    s.kv_heads = Hkv / N;
    s.kv_head_begin = r * s.kv_heads;
  } else {
    s.kv_heads = 1;
    s.kv_head_begin = s.head_begin / (H / Hkv);  // the group of this rank's query heads
  }
  s.inner = I / N;
  s.inner_begin = r * s.inner;
  s.vocab_split = N > 1 && V % N == 0;
  s.vocab = s.vocab_split ? V / N : V;
  s.vocab_begin = s.vocab_split ? r * s.vocab : 0;
  return s;
}

ShardedWeightSource::ShardedWeightSource(const WeightStore& store) : state_(std::make_shared<State>()) {
  state_->store = &store;
}

void ShardedWeightSource::slice_cols(const std::string& name, const Shape& full, int64_t begin, int64_t end) {
  VLM_CHECK(full.ndim == 2 && 0 <= begin && begin < end && end <= full[1], "columns [{}, {}) of {} {}", begin, end, name,
            full.str());
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->slices[name] = Slice{full, begin, end};
}

TensorView ShardedWeightSource::lookup(State& st, const std::string& name, const Shape& expected) {
  std::lock_guard<std::mutex> lock(st.mu);
  const auto it = st.slices.find(name);
  if (it == st.slices.end()) return st.store->get(name, expected);
  const Slice& sl = it->second;
  const int64_t rows = sl.full[0], cols = sl.end - sl.begin;
  if (!(expected == Shape{rows, cols}))
    throw LoadError(fmt::format("{}: columns [{}, {}) of {} read as {}", name, sl.begin, sl.end, sl.full.str(), expected.str()));
  if (st.store->dummy_weights() != nullptr)  // only these columns made (the store holds them)
    return st.store->get_slice(name, sl.full, 0, rows, sl.begin, sl.end);
  auto c = st.copies.find(name);
  if (c == st.copies.end()) {
    const TensorView src = st.store->get(name, sl.full);
    const size_t es = dtype_size(src.dtype);
    Tensor t = Tensor::empty({rows, cols}, src.dtype);
    for (int64_t i = 0; i < rows; ++i)
      std::memcpy(static_cast<char*>(t.data()) + static_cast<size_t>(i * cols) * es,
                  static_cast<const char*>(src.data) + static_cast<size_t>(i * sl.full[1] + sl.begin) * es,
                  static_cast<size_t>(cols) * es);
    c = st.copies.emplace(name, std::move(t)).first;
  }
  return c->second.view();
}

std::optional<Fp8Weight> ShardedWeightSource::fp8_lookup(State& st, const std::string& name, const Shape& expected) {
  std::lock_guard<std::mutex> lock(st.mu);
  const auto it = st.slices.find(name);
  if (!st.store->is_fp8(name)) return std::nullopt;
  if (it == st.slices.end()) return st.store->fp8(name, expected);
  const Slice& sl = it->second;
  const int64_t N = sl.full[0], K = sl.full[1], cols = sl.end - sl.begin;
  if (!(expected == Shape{N, cols}))
    throw LoadError(fmt::format("{}: columns [{}, {}) of {} read as {}", name, sl.begin, sl.end, sl.full.str(), expected.str()));
  Fp8Weight f = st.store->fp8(name, sl.full);
  if (f.scales == Fp8Scales::Block) {  // the grid's columns go with the weight's
    const int64_t bk = f.block_k;
    if (sl.begin % bk != 0 || (sl.end % bk != 0 && sl.end != K))
      throw LoadError(fmt::format("tensor parallelism: columns [{}, {}) of {} cut its {}x{} FP8 scale blocks (the split "
                                  "must fall on a multiple of {} columns)", sl.begin, sl.end, name, f.block_n, bk, bk));
    const int64_t gr = f.scale.view().dim(0), gc = f.scale.view().dim(1), g0 = sl.begin / bk,
                  g1 = (sl.end + bk - 1) / bk;
    Tensor grid = Tensor::empty({gr, g1 - g0}, DType::F32);
    for (int64_t i = 0; i < gr; ++i)
      for (int64_t j = g0; j < g1; ++j) grid.as<float>()[i * (g1 - g0) + (j - g0)] = f.scale.as<float>()[i * gc + j];
    f.scale = std::move(grid);
  }  // per-channel: every output channel's scale, as stored
  auto c = st.fp8_copies.find(name);
  if (c == st.fp8_copies.end()) {
    Tensor q = Tensor::empty({N, cols}, f.q.dtype);
    for (int64_t i = 0; i < N; ++i)
      std::memcpy(static_cast<uint8_t*>(q.data()) + i * cols, static_cast<const uint8_t*>(f.q.data) + i * K + sl.begin,
                  static_cast<size_t>(cols));
    c = st.fp8_copies.emplace(name, std::move(q)).first;
  }
  f.q = c->second.view();
  return f;
}

WeightSource ShardedWeightSource::under(const std::string& prefix) const {
  std::shared_ptr<State> st = state_;
  const WeightSource plain([st](const std::string& n, const Shape& e) { return lookup(*st, n, e); }, prefix);
  return plain.with_lookups(
      [st](const std::string& n, const Shape& e) { return fp8_lookup(*st, n, e); },
      [st](const std::string& n, const Shape& full, int64_t r0, int64_t r1) {
        bool sliced = false;
        {
          std::lock_guard<std::mutex> lock(st->mu);
          sliced = st->slices.count(n) != 0;
        }
        if (!sliced) return st->store->get_slice(n, full, r0, r1, 0, full.numel() / full[0]);
        const TensorView t = lookup(*st, n, full);  // rows of this rank's columns ([rows, end - begin])
        VLM_CHECK(0 <= r0 && r0 < r1 && r1 <= t.dim(0), "rows [{}, {}) of {} {}", r0, r1, n, t.shape.str());
        const int64_t K = t.dim(1), elt = static_cast<int64_t>(dtype_size(t.dtype));
        return TensorView(static_cast<char*>(t.data) + r0 * K * elt, t.dtype, {r1 - r0, K});
      });
}

}  // namespace vlm

#include "model/layers/cuda/cuda_vision_layers.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/cuda/attention/varlen_attention.h"
#include "kernels/cuda/core/device_upload.h"
#include "kernels/cuda/ops/row_ops_cuda.h"
#include "kernels/cuda/ops/vision_ops_cuda.h"
#include "kernels/ops/rope.h"
#include "model/layers/cpu/cpu_vision_layers.h"  // linspace_f32
#include "model/layers/cuda/cuda_device_linear.h"
#include "model/layers/cuda/cuda_step.h"
#include "model/vision/cuda/cuda_vision_cudnn.h"

namespace vlm {
namespace {

// Tags of the int arrays a step uploads (CudaStepInts: one device copy per host array and tag).
enum IntsTag : int64_t { kAsIs = 0, kUnitRows = 1, kInverse = 2, kRepeat = 3, kBlends = 4 };

CudaStepInts& ints_of(const CudaStep& s) {
  VLM_CHECK(s.ints != nullptr, "a GPU vision step without its metadata buffer");
  return *s.ints;
}

// v as int32 on the device.
const int32_t* device_ints(CudaStep& s, std::span<const int64_t> v) {
  return ints_of(s).get(v.data(), kAsIs, static_cast<int64_t>(v.size()),
                        [&](int32_t* h) {
                          for (size_t i = 0; i < v.size(); ++i) h[i] = static_cast<int32_t>(v[i]);
                        },
                        s.stream);
}

// The rows of units `order` (unit rows each), unit after unit: [order.size() * unit].
const int32_t* unit_rows(CudaStep& s, std::span<const int64_t> order, int64_t unit) {
  const auto n = static_cast<int64_t>(order.size());
  return ints_of(s).get(order.data(), kUnitRows + 8 * unit, n * unit,
                        [&](int32_t* h) {
                          for (int64_t j = 0; j < n; ++j)
                            for (int64_t m = 0; m < unit; ++m)
                              h[j * unit + m] = static_cast<int32_t>(order[static_cast<size_t>(j)] * unit + m);
                        },
                        s.stream);
}

class CudaSegmentAttention final : public SegmentAttention {
 public:
  explicit CudaSegmentAttention(const SegmentAttentionSpec& spec) : spec_(spec) {}
  void forward(Step& st, Act qkv, const RopeRows* rope, std::span<const int64_t> cu, Act out) const override {
    CudaStep& s = CudaStep::of(st);
    const int64_t T = qkv.rows, C = spec_.num_heads * spec_.head_dim;
    const int H = static_cast<int>(spec_.num_heads), D = static_cast<int>(spec_.head_dim);
    VLM_CHECK(qkv.cols == 3 * C && cu.size() >= 2 && cu.front() == 0 && cu.back() == T && out.rows == T &&
                  out.cols == C && qkv.dtype == s.dt && out.dtype == s.dt,
              "segment attention over [{}, {}] {} into [{}, {}] with segments ending at {}", T, qkv.cols,
              dtype_name(qkv.dtype), out.rows, out.cols, cu.empty() ? -1 : cu.back());
    if (rope != nullptr) cuda::vision_rope_qk(qkv.data, s.dt, T, H, D, static_cast<const float*>(rope->table), s.stream);
    const int segments = static_cast<int>(cu.size()) - 1;
    int64_t max_len = 0, min_len = T;
    for (int i = 0; i < segments; ++i) {
      max_len = std::max(max_len, cu[i + 1] - cu[i]);
      min_len = std::min(min_len, cu[i + 1] - cu[i]);
    }
    const int32_t* d_cu = device_ints(s, cu);
    const char* q = static_cast<const char*>(qkv.data);
    const auto e = static_cast<int64_t>(dtype_size(s.dt));
    // Equal segments (the images of a CLIP call, a video group's frames) may run through cuDNN.
    const int equal_len = min_len == max_len ? static_cast<int>(max_len) : 0;
    if (s.cudnn == nullptr || equal_len <= 0 ||
        !s.cudnn->attention(q, q + C * e, q + 2 * C * e, 3 * C, s.dt, H, D, segments, equal_len, spec_.scale, out.data,
                            s.stream))
      cuda::varlen_attention(q, q + C * e, q + 2 * C * e, 3 * C, s.dt, H, D, d_cu, segments, static_cast<int>(max_len),
                             spec_.scale, out.data, s.stream);
    s.mark("segment_attention");
  }

 private:
  SegmentAttentionSpec spec_;
};

// Table [T, D] f32: vision_rope_table over the positions, inverse frequencies over D/2 dims.
class CudaVisionRopeTable final : public VisionRopeTable {
 public:
  explicit CudaVisionRopeTable(const VisionRopeSpec& spec) : D_(spec.head_dim) {
    RopeConfig r;
    r.head_dim = r.rotary_dim = static_cast<int>(spec.head_dim / 2);
    r.theta = spec.theta;
    inv_freq_ = cuda::upload_converted({cuda::f32_view(RotaryEmbedding(r).inv_freq())}, DType::F32, nullptr);
  }
  RopeRows build(Step& st, std::span<const int32_t> pos_hw) const override {
    CudaStep& s = CudaStep::of(st);
    const auto T = static_cast<int64_t>(pos_hw.size() / 2);
    const int32_t* d_pos = ints_of(s).get(
        pos_hw.data(), kAsIs, 2 * T, [&](int32_t* h) { std::memcpy(h, pos_hw.data(), static_cast<size_t>(2 * T) * 4); },
        s.stream);
    auto* table = static_cast<float*>(s.scratch(CudaScratch::kRopeTable, T * D_ * 4));
    cuda::vision_rope_table(d_pos, inv_freq_.as<float>(), T, D_, table, s.stream);
    return RopeRows{table, D_};
  }

 private:
  int64_t D_;
  cuda::DeviceBuffer inv_freq_;  // [D/4] f32
};

// Unfold (dt), the conv as one GEMM into f32, then bias, class token and positions (clip_embed).
class CudaPatchEmbedding final : public PatchEmbedding {
 public:
  CudaPatchEmbedding(const WeightSource& w, const PatchEmbeddingSpec& spec, DType dt, int64_t* bytes)
      : spec_(spec), conv_(upload_linear(w, {spec.conv}, dt, true, bytes)) {
    VLM_CHECK(spec.channels == 3, "a patch embedding over {} channels (the GPU unfold takes 3)", spec.channels);
    VLM_CHECK(spec.patch_size > 0 && spec.image_size >= spec.patch_size, "image size {} over patches of {}",
              spec.image_size, spec.patch_size);
    C_ = conv_.N;
    G_ = spec.image_size / spec.patch_size;
    const int64_t L = tokens_per_image();
    VLM_CHECK(spec.positions.shape == Shape({L, C_}), "positions {} are not [{}, {}]", spec.positions.name, L, C_);
    if (!spec.class_embedding.empty())
      class_ = cuda::upload_converted({w.get(spec.class_embedding, {C_})}, DType::F32, bytes);
    pos_ = cuda::upload_converted({w.get(spec.positions)}, DType::F32, bytes);
  }
  int64_t tokens_per_image() const override { return G_ * G_ + (spec_.class_embedding.empty() ? 0 : 1); }

  void forward(Step& st, Act pixels, Act x) const override {
    CudaStep& s = CudaStep::of(st);
    const int64_t p = spec_.patch_size, S = spec_.image_size, K = conv_.K;
    const int64_t N = pixels.rows, P = G_ * G_, L = tokens_per_image(), C = C_;
    VLM_CHECK(pixels.cols == 3 * S * S && pixels.dtype == DType::F32 && x.rows == N * L && x.cols == C &&
                  x.dtype == DType::F32 && K == 3 * p * p,
              "patch embedding of [{}, {}] {} into [{}, {}] {}", pixels.rows, pixels.cols, dtype_name(pixels.dtype),
              x.rows, x.cols, dtype_name(x.dtype));
    void* patches = s.scratch(CudaScratch::kPatches, N * P * K * static_cast<int64_t>(dtype_size(s.dt)));  // [N*P, K]
    auto* pe = static_cast<float*>(s.scratch(CudaScratch::kPatchOut, N * P * C * 4));  // [N*P, C] f32
    cuda::unfold_patches(pixels.f32(), N, S, p, patches, s.dt, s.stream);
    s.gemm->linear(patches, conv_.w.get(), s.dt, nullptr, pe, DType::F32, 0.0f, N * P, C, K, s.stream);
    cuda::clip_embed(pe, class_.as<float>(), conv_.bias_f32.as<float>(), pos_.as<float>(), N, P, L, C, x.f32(),
                     s.stream);
    s.mark("patch_embedding");
  }

 private:
  PatchEmbeddingSpec spec_;
  DeviceLinear conv_;             // [C, 3*p*p] dt, bias f32 (or none)
  cuda::DeviceBuffer class_, pos_;  // [C] f32 (or empty), [L, C] f32
  int64_t C_ = 0, G_ = 0;
};

class CudaRowOps final : public RowOps {
 public:
  // Qwen3-VL's DeepStack: plane p of the step's media rows (on the device since the embedding,
  // CudaStep::media_planes) added into x at their rows; nothing on steps without media rows.
  void add_override_plane(Step& st, int64_t plane, Act x) const override {
    CudaStep& s = CudaStep::of(st);
    if (s.num_media_rows == 0) return;
    VLM_CHECK(s.media_planes != nullptr && plane >= 1 && plane < s.num_planes && x.dtype == DType::F32 && x.rows == s.T,
              "override plane {} of {} into [{}, {}] {} ({} rows in the step)", plane, s.num_planes, x.rows, x.cols,
              dtype_name(x.dtype), s.T);
    const int64_t C = x.cols;
    cuda::add_rows_at(s.media_planes + plane * C, s.num_planes * C, s.media_rows, s.num_media_rows, C, x.f32(),
                      s.stream);
    s.mark("deepstack");
  }
  void gather_units(Step& st, Act src, std::span<const int64_t> order, int64_t unit, Act dst) const override {
    CudaStep& s = CudaStep::of(st);
    const auto R = static_cast<int64_t>(order.size()) * unit;
    VLM_CHECK(src.cols == dst.cols && R <= dst.rows, "{} units of {} rows of [{}, {}] into [{}, {}]", order.size(), unit,
              src.rows, src.cols, dst.rows, dst.cols);
    cuda::gather_rows(src.data, src.dtype, unit_rows(s, order, unit), R, src.cols, dst.data, dst.dtype, dst.cols, 0,
                      s.stream);
  }
  // A permutation of dst's units (every unit written once): a gather through the inverse order
  // (the towers' scatter of merged rows back to the prompt order), else a copy to the rows.
  void scatter_units(Step& st, Act src, std::span<const int64_t> order, int64_t unit, Act dst) const override {
    CudaStep& s = CudaStep::of(st);
    const auto n = static_cast<int64_t>(order.size());
    VLM_CHECK(src.cols == dst.cols && n * unit <= src.rows, "{} units of {} rows of [{}, {}] into [{}, {}]", n, unit,
              src.rows, src.cols, dst.rows, dst.cols);
    std::vector<int64_t> inverse(static_cast<size_t>(dst.rows / unit), -1);
    bool permutation = n * unit == dst.rows;
    for (int64_t j = 0; j < n && permutation; ++j) {
      const int64_t u = order[static_cast<size_t>(j)];
      permutation = u >= 0 && u < n && inverse[static_cast<size_t>(u)] < 0;
      if (permutation) inverse[static_cast<size_t>(u)] = j;
    }
    if (permutation) {
      const int32_t* idx = ints_of(s).get(order.data(), kInverse + 8 * unit, n * unit,
                                          [&](int32_t* h) {
                                            for (int64_t u = 0; u < n; ++u)
                                              for (int64_t m = 0; m < unit; ++m)
                                                h[u * unit + m] = static_cast<int32_t>(inverse[static_cast<size_t>(u)] * unit + m);
                                          },
                                          s.stream);
      cuda::gather_rows(src.data, src.dtype, idx, n * unit, src.cols, dst.data, dst.dtype, dst.cols, 0, s.stream);
    } else {
      for (int64_t u : order) VLM_CHECK(u >= 0 && (u + 1) * unit <= dst.rows, "unit {} of {} rows", u, dst.rows);
      cuda::copy_rows(src.data, src.dtype, nullptr, dst.data, dst.dtype, unit_rows(s, order, unit), n * unit, src.cols,
                      s.stream);
    }
  }
  void gather_rows(Step& st, Act src, std::span<const int64_t> rows, Act dst, int64_t col) const override {
    CudaStep& s = CudaStep::of(st);
    const int64_t C = src.cols;
    VLM_CHECK(static_cast<int64_t>(rows.size()) == dst.rows && col >= 0 && col + C <= dst.cols,
              "{} rows of {} into columns [{}, {}) of [{}, {}]", rows.size(), C, col, col + C, dst.rows, dst.cols);
    cuda::gather_rows(src.data, src.dtype, device_ints(s, rows), dst.rows, C, dst.data, dst.dtype, dst.cols, col,
                      s.stream);
  }
  void copy_rows(Step& st, Act src, std::span<const int64_t> src_rows, Act dst,
                 std::span<const int64_t> dst_rows) const override {
    CudaStep& s = CudaStep::of(st);
    VLM_CHECK(src_rows.size() == dst_rows.size() && dst.cols == src.cols, "{} rows of {} into {} rows of {}",
              src_rows.size(), src.cols, dst_rows.size(), dst.cols);
    for (size_t j = 0; j < src_rows.size(); ++j)
      VLM_CHECK(src_rows[j] >= 0 && src_rows[j] < src.rows && dst_rows[j] >= 0 && dst_rows[j] < dst.rows,
                "row {} of {} to row {} of {}", src_rows[j], src.rows, dst_rows[j], dst.rows);
    cuda::copy_rows(src.data, src.dtype, device_ints(s, src_rows), dst.data, dst.dtype, device_ints(s, dst_rows),
                    static_cast<int64_t>(src_rows.size()), src.cols, s.stream);
  }
  void bilinear(Step& st, Act src, int64_t h, int64_t w, int64_t oh, int64_t ow, Act dst) const override {
    CudaStep& s = CudaStep::of(st);
    VLM_CHECK(src.rows == h * w && dst.rows == oh * ow && src.cols == dst.cols && src.dtype == dst.dtype,
              "bilinear [{}, {}] as {}x{} into [{}, {}] as {}x{}", src.rows, src.cols, h, w, dst.rows, dst.cols, oh, ow);
    cuda::bilinear_resize(src.data, src.dtype, h, w, src.cols, oh, ow, dst.data, s.stream);
  }
};

// The table in f32 on the device; write() copies row `index` into the rows (converted to dst's dtype).
class CudaLearnedRows final : public LearnedRows {
 public:
  CudaLearnedRows(const WeightSource& w, const WeightRef& table, int64_t* bytes) {
    const TensorView t = w.get(table);
    rows_ = t.ndim() == 1 ? 1 : t.dim(0);
    cols_ = t.numel() / rows_;
    table_ = cuda::upload_converted({t}, DType::F32, bytes);
  }
  void write(Step& st, int64_t index, std::span<const int64_t> rows, Act dst) const override {
    CudaStep& s = CudaStep::of(st);
    VLM_CHECK(index >= 0 && index < rows_ && dst.cols == cols_, "learned row {} of {} into [{}, {}]", index, rows_,
              dst.rows, dst.cols);
    for (int64_t r : rows) VLM_CHECK(r >= 0 && r < dst.rows, "row {} of {}", r, dst.rows);
    const auto n = static_cast<int64_t>(rows.size());
    const int32_t* same = ints_of(s).get(this, kRepeat + 8 * index, n, [&](int32_t* h) { std::fill(h, h + n, 0); },
                                         s.stream);
    cuda::copy_rows(table_.as<float>() + index * cols_, DType::F32, same, dst.data, dst.dtype, device_ints(s, rows), n,
                    cols_, s.stream);
  }

 private:
  cuda::DeviceBuffer table_;  // [rows, cols] f32
  int64_t rows_ = 0, cols_ = 0;
};

// The table f32 on the device; the blends (corner rows, weights, destination rows) made on the
// host per call exactly as CpuPositionTable makes them, then one add_blended_rows launch whose
// f32 arithmetic is the CPU's: the rows are the CPU's bit for bit.
class CudaPositionTable final : public PositionTable {
 public:
  CudaPositionTable(const WeightSource& w, const PositionTableSpec& spec, int64_t* bytes) : spec_(spec) {
    VLM_CHECK(spec.side > 0 && spec.merge > 0 && spec.table.shape.ndim == 2 &&
                  spec.table.shape[0] == spec.side * spec.side,
              "position table {} for an {} x {} grid", spec.table.name, spec.side, spec.side);
    const TensorView t = w.get(spec.table);
    C_ = t.dim(1);
    table_ = cuda::upload_converted({t}, DType::F32, bytes);
  }

  void add(Step& st, std::span<const std::array<int32_t, 3>> grids, Act x) const override {
    CudaStep& s = CudaStep::of(st);
    const int64_t N = spec_.side, ms = spec_.merge;
    int64_t P = 0, E = 0;
    for (const auto& g : grids) {
      VLM_CHECK(g[0] > 0 && g[1] > 0 && g[2] > 0 && g[1] % ms == 0 && g[2] % ms == 0, "grid {}x{}x{} (merge {})", g[0],
                g[1], g[2], ms);
      P += static_cast<int64_t>(g[0]) * g[1] * g[2];
      E += static_cast<int64_t>(g[1]) * g[2];
    }
    VLM_CHECK(x.rows == P && x.cols == C_ && x.dtype == DType::F32, "positions of {} patches of {} into [{}, {}] {}", P,
              C_, x.rows, x.cols, dtype_name(x.dtype));
    auto fill = [&](int32_t* out) {
      int64_t base = 0;
      for (const auto& g : grids) {
        const int64_t t = g[0], h = g[1], w = g[2];
        const std::vector<float> ph = linspace_f32(static_cast<float>(N - 1), h);
        const std::vector<float> pw = linspace_f32(static_cast<float>(N - 1), w);
        for (int64_t i = 0; i < h; ++i)
          for (int64_t j = 0; j < w; ++j) {
            const float pi = ph[static_cast<size_t>(i)], pj = pw[static_cast<size_t>(j)];
            const auto fh = static_cast<int64_t>(pi), fw = static_cast<int64_t>(pj);
            const int64_t ch = std::min(fh + 1, N - 1), cw = std::min(fw + 1, N - 1);
            const float dh = pi - static_cast<float>(fh), dw = pj - static_cast<float>(fw);
            const float wt[4] = {(1.0f - dh) * (1.0f - dw), (1.0f - dh) * dw, dh * (1.0f - dw), dh * dw};
            const int64_t in_frame = ((i / ms) * (w / ms) + j / ms) * ms * ms + (i % ms) * ms + j % ms;
            out[0] = static_cast<int32_t>(fh * N + fw), out[1] = static_cast<int32_t>(fh * N + cw);
            out[2] = static_cast<int32_t>(ch * N + fw), out[3] = static_cast<int32_t>(ch * N + cw);
            std::memcpy(out + 4, wt, sizeof(wt));
            out[8] = static_cast<int32_t>(base + in_frame), out[9] = static_cast<int32_t>(t);
            out[10] = static_cast<int32_t>(h * w);
            out += 11;
          }
        base += t * h * w;
      }
    };
    const int32_t* entries = ints_of(s).get(grids.data(), kBlends, 11 * E, fill, s.stream);
    cuda::add_blended_rows(table_.as<float>(), C_, entries, E, x.f32(), s.stream);
    s.mark("position_table");
  }

 private:
  PositionTableSpec spec_;
  int64_t C_ = 0;
  cuda::DeviceBuffer table_;  // [N*N, C] f32
};

}  // namespace

std::unique_ptr<PositionTable> make_cuda_position_table(const WeightSource& w, const PositionTableSpec& spec,
                                                        int64_t* bytes) {
  return std::make_unique<CudaPositionTable>(w, spec, bytes);
}

std::unique_ptr<SegmentAttention> make_cuda_segment_attention(const SegmentAttentionSpec& spec) {
  return std::make_unique<CudaSegmentAttention>(spec);
}
std::unique_ptr<VisionRopeTable> make_cuda_vision_rope_table(const VisionRopeSpec& spec) {
  return std::make_unique<CudaVisionRopeTable>(spec);
}
std::unique_ptr<RowOps> make_cuda_row_ops() { return std::make_unique<CudaRowOps>(); }
std::unique_ptr<LearnedRows> make_cuda_learned_rows(const WeightSource& w, const WeightRef& table, int64_t* bytes) {
  return std::make_unique<CudaLearnedRows>(w, table, bytes);
}
std::unique_ptr<PatchEmbedding> make_cuda_patch_embedding(const WeightSource& w, const PatchEmbeddingSpec& spec,
                                                          DType dt, int64_t* bytes) {
  return std::make_unique<CudaPatchEmbedding>(w, spec, dt, bytes);
}

}  // namespace vlm

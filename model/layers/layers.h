// The layer vocabulary: what architecture files (model/arch/) compose. Each interface has a CPU
// implementation, the exact f32 reference (model/layers/cpu/), and a CUDA one (model/layers/cuda/).
// Contracts shared by all: Acts come from the same backend's Step; shapes in the comments are
// the Acts' [rows, cols]; T = the step's tokens, R = its logit rows; a layer's forward may be
// called once per step per layer instance (the GPU records it into CUDA graphs: no host reads
// of device data, no data-dependent host branching).
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "model/layers/act.h"
#include "model/layers/step.h"

namespace vlm {

// Token embeddings, with the step's media rows (the embedding override) in place of theirs.
class Embedding {
 public:
  virtual ~Embedding() = default;
  virtual void forward(Step& s, Act x /*[T,C] Residual*/) const = 0;
};

// RMSNorm or LayerNorm. h may be x (in place).
class Norm {
 public:
  virtual ~Norm() = default;
  virtual void forward(Step& s, Act x /*[T,C]*/, Act h /*[T,C]*/) const = 0;
};

// y = n(x) W^T (+ bias) for one weight or several parts of the same input (q|k|v, gate|up), n the
// layer's pre-norm when it has one (else the identity). The norm belongs to the layer so that a
// backend may fold it into the product (the GPU does for few rows: gemv_norm.h).
class Linear {
 public:
  virtual ~Linear() = default;
  virtual int64_t out_features() const = 0;  // N (all parts)
  virtual void forward(Step& s, Act x /*[M,K]*/, Act y /*[M,N]*/, Accum a = Accum::Write) const = 0;
  // y[r] = n(x[logit row r]) W^T for the step's logit rows (an LM head after the final norm).
  virtual void forward_rows(Step& s, Act x /*[T,K]*/, Act y /*[R,N]*/) const = 0;
};

// cos/sin of every row of the step, made once and read by every layer's attention.
struct RopeRows {
  const void* table = nullptr;  // backend memory, backend layout
  int64_t cols = 0;
};
class RopeTable {
 public:
  virtual ~RopeTable() = default;
  virtual RopeRows build(Step& s) const = 0;  // 1-D positions, or M-RoPE when the step has them
};

class CausalAttention {
 public:
  virtual ~CausalAttention() = default;
  // qkv: the fused projection of the layer's input. Returns the attention [T, H*D] (Hidden) in
  // memory the backend owns (the GPU's carries rows of slack its prefill kernels pad into), valid
  // until the next layer's attention runs.
  virtual Act forward(Step& s, Act qkv /*[T,(H+2Hkv)D]*/, const RopeRows& rope) const = 0;
};

// y (+)= mlp(n(x)), n the layer's pre-norm when it has one. x and y may be the same Act (the
// residual add: every read of x happens before y is written).
class Mlp {
 public:
  virtual ~Mlp() = default;
  virtual int64_t inner_cols() const = 0;  // columns of the `inner` scratch forward() needs
  virtual void forward(Step& s, Act x /*[T,C]*/, Act inner /*[T,inner_cols]*/, Act y /*[T,Cout]*/,
                       Accum a = Accum::Write) const = 0;
};

// Bidirectional attention within segments: rows [cu[i], cu[i+1]) attend to each other only.
class SegmentAttention {
 public:
  virtual ~SegmentAttention() = default;
  virtual void forward(Step& s, Act qkv /*[T,3*H*D]*/, const RopeRows* rope /*or null*/,
                       std::span<const int64_t> cu /*[segments+1]*/, Act out /*[T,H*D]*/) const = 0;
};

// A ViT's embedding of N whole images (PatchEmbeddingSpec): pixels [N, channels*S*S] (each
// image its channel planes of S rows of S) -> x [N*L, C] Residual, image by image: the class row
// (class token + position 0) when there is one, then the G x G patches row-major, each
// conv(patch) (+ bias) + its position. One call, so a backend may do bias, class token and
// positions in one pass after the product (the GPU's clip_embed).
class PatchEmbedding {
 public:
  virtual ~PatchEmbedding() = default;
  virtual int64_t tokens_per_image() const = 0;  // L
  virtual void forward(Step& s, Act pixels /*[N,channels*S*S]*/, Act x /*[N*L,C]*/) const = 0;
};

class VisionRopeTable {
 public:
  virtual ~VisionRopeTable() = default;
  virtual RopeRows build(Step& s, std::span<const int32_t> pos_hw /*[T,2] row, column*/) const = 0;
};

// A learned N x N grid of positions (Qwen3-VL's pos_embed [N*N, C], PositionTableSpec) added to
// the patch rows of items with grids (t, h, w), item by item: the table bilinearly sampled at an
// h x w grid of points (transformers' fast_pos_embed_interpolate: per axis linspace(0, N-1, h)
// in f32, f = floor, c = min(f + 1, N - 1), d = point - f; row (i, j) = the corners (f_i, f_j),
// (f_i, c_j), (c_i, f_j), (c_i, c_j) times (1-dh)(1-dw), (1-dh)dw, dh(1-dw), dh dw, products
// rounded to f32 and summed in that order), the same for each of the t frames, rows in
// merge-block order (the merge x merge patches of a merged unit consecutive, units row-major;
// the order of the preprocessed patch rows).
class PositionTable {
 public:
  virtual ~PositionTable() = default;
  // x [P, C] += the positions, P = sum t*h*w; h and w multiples of the spec's merge.
  virtual void add(Step& s, std::span<const std::array<int32_t, 3>> grids /*(t, h, w)*/, Act x /*[P,C]*/) const = 0;
};

// Data movement between activations, no weights. Rows move in units of `unit` consecutive rows.
class RowOps {
 public:
  virtual ~RowOps() = default;
  // dst unit j = src unit order[j].
  virtual void gather_units(Step& s, Act src, std::span<const int64_t> order, int64_t unit, Act dst) const = 0;
  // dst unit order[j] = src unit j.
  virtual void scatter_units(Step& s, Act src, std::span<const int64_t> order, int64_t unit, Act dst) const = 0;
  // dst[r, col : col + src.cols] = src[rows[r]] for every r < rows.size(); dst's other columns
  // are left as they are (one column slot of a wider Act: side-by-side hidden states).
  virtual void gather_rows(Step& s, Act src /*[T,C]*/, std::span<const int64_t> rows /*[R]*/, Act dst /*[R,>=col+C]*/,
                           int64_t col) const = 0;
  // dst[dst_rows[j]] = src[src_rows[j]] for every j (same widths).
  virtual void copy_rows(Step& s, Act src /*[T,C]*/, std::span<const int64_t> src_rows, Act dst /*[U,C]*/,
                         std::span<const int64_t> dst_rows) const = 0;
  // x[t] += plane `plane` of the step's embedding override at row t, for every row t the override
  // replaces (use[t] != 0; none without an override): Qwen3-VL's DeepStack after decoder layer
  // plane - 1 (transformers' _deepstack_process). 1 <= plane < the override's num_planes.
  virtual void add_override_plane(Step& s, int64_t plane, Act x /*[T,C]*/) const = 0;
  // torch's interpolate(mode="bilinear", align_corners=False) of a channels-last map: src rows are
  // an h x w map, dst rows an oh x ow one (LLaVA-OneVision's pooling and shrink).
  virtual void bilinear(Step& s, Act src /*[h*w,C]*/, int64_t h, int64_t w, int64_t oh, int64_t ow,
                        Act dst /*[oh*ow,C]*/) const = 0;
};

// Rows learned with the model (LLaVA-OneVision's image_newline): a table [n, C] in the backend's
// memory, written into rows of an activation.
class LearnedRows {
 public:
  virtual ~LearnedRows() = default;
  // dst[rows[j]] = table[index] for every j.
  virtual void write(Step& s, int64_t index, std::span<const int64_t> rows, Act dst /*[*,C]*/) const = 0;
};

// The collectives of tensor parallelism over a step's activations (rank r of N ranks, each its
// own backend, weights and cache: model/layers/tensor_parallel.h). Every rank calls them in the
// same order with Acts of the same shape; the GPU's are enqueued on the step's stream (captured in
// the decode graphs like the layers).
class Collective {
 public:
  virtual ~Collective() = default;
  // x = the sum over ranks of x, in place (the sum in f32 on every backend for f32 Acts).
  virtual void all_reduce_sum(Step& s, Act x /*[T,C]*/) const = 0;
  // out[:, r*Vl : (r+1)*Vl] = rank r's local, for every rank r (every rank gets all of out);
  // staging: scratch of out's shape and dtype (it holds the ranks' blocks one after another).
  virtual void gather_cols(Step& s, Act local /*[R,Vl]*/, Act staging /*[R,N*Vl]*/, Act out /*[R,N*Vl]*/) const = 0;
};

}  // namespace vlm

#include "model/vision/cuda/cuda_vision_lanes.h"

#include "kernels/core/check.h"

namespace vlm {
namespace {

int64_t elem_bytes(ActRole role, DType dt) {
  return role == ActRole::Hidden ? static_cast<int64_t>(dtype_size(dt)) : 4;  // Residual, Logits: f32
}

}  // namespace

CudaVisionLanes::CudaVisionLanes(DType dt, int lanes) : dt_(dt) {
  VLM_CHECK(dt == DType::F32 || dt == DType::BF16 || dt == DType::F16, "GPU vision dtype {}", dtype_name(dt));
  VLM_CHECK(lanes >= 1 && lanes <= kLanes, "{} vision lanes", lanes);
  for (int i = 0; i < lanes; ++i) lanes_[static_cast<size_t>(i)] = std::make_unique<Lane>();
}

CudaVisionLanes::~CudaVisionLanes() = default;

int64_t CudaVisionLanes::bytes(const ActivationPlan& largest, int64_t rows, const ScratchPerRow& scratch, int64_t ints,
                               DType dt) {
  int64_t b = ints * 4;
  for (const ActivationPlan::Buf& buf : largest.bufs) b += buf.rows * buf.cols * elem_bytes(buf.role, dt);
  for (int64_t per_row : scratch) b += rows * per_row;
  return b;
}

void CudaVisionLanes::reserve(const ActivationPlan& largest, int64_t rows, const ScratchPerRow& scratch, int64_t ints) {
  VLM_CHECK(rows > 0, "a vision reservation of {} rows", rows);
  largest_ = largest;
  rows_ = rows;
  scratch_per_row_ = scratch;
  bufs_.resize(largest.bufs.size());
  for (size_t i = 0; i < bufs_.size(); ++i) {
    const ActivationPlan::Buf& b = largest.bufs[i];
    VLM_CHECK(b.rows >= 0 && !b.logit_rows, "vision plan buffer {} of logit rows", i);
    bufs_[i].resize(static_cast<size_t>(b.rows * b.cols * elem_bytes(b.role, dt_)));
  }
  for (size_t k = 0; k < scratch_.size(); ++k) scratch_[k].resize(static_cast<size_t>(rows * scratch[k]));
  ints_.reserve(ints);
}

CudaStep& CudaVisionLanes::step(int lane, const ActivationPlan& plan, int64_t row0, int64_t T, cudaStream_t s) {
  VLM_CHECK(lane >= 0 && lane < kLanes && lanes_[static_cast<size_t>(lane)] && plan.bufs.size() == largest_.bufs.size() &&
                row0 >= 0 && row0 + T <= rows_,
            "vision lane {} over rows {}..{} of the {} reserved", lane, row0, row0 + T, rows_);
  Lane& L = *lanes_[static_cast<size_t>(lane)];
  CudaStep& st = L.step;
  st.stream = s;
  st.dt = dt_;
  st.T = T;
  st.R = 0;
  st.fused_norm = false;
  st.gemv = false;
  st.gemm = &L.gemm;
  st.pool = &L.scratch;
  st.cudnn = &L.cudnn;
  st.ints = &ints_;
  st.acts.clear();
  for (size_t i = 0; i < plan.bufs.size(); ++i) {
    const ActivationPlan::Buf& b = plan.bufs[i];
    const ActivationPlan::Buf& big = largest_.bufs[i];
    // This call's part: a buffer of T rows starts at row0, one of T / 4 rows at row0 / 4 (the
    // call's own ratio, exact where the reservation's is not).
    const int64_t off = T > 0 ? row0 * b.rows / T : 0;
    VLM_CHECK(b.cols == big.cols && b.role == big.role && off + b.rows <= big.rows,
              "vision buffer {}: rows {}..{} of the {} reserved", i, off, off + b.rows, big.rows);
    const int64_t e = elem_bytes(b.role, dt_);
    const DType dt = b.role == ActRole::Hidden ? dt_ : DType::F32;
    st.acts.push_back(Act{bufs_[i].as<char>() + off * b.cols * e, b.rows, b.cols, dt});
  }
  for (size_t k = 0; k < scratch_.size(); ++k) {
    const int64_t per_row = scratch_per_row_[k];
    if (per_row > 0)
      L.scratch.assign(static_cast<CudaScratch::Slot>(k), scratch_[k].as<char>() + row0 * per_row,
                       (rows_ - row0) * per_row);
  }
  return st;
}

int64_t CudaVisionLanes::cudnn_calls() const {
  int64_t n = 0;
  for (const auto& l : lanes_)
    if (l) n += l->cudnn.calls();
  return n;
}

}  // namespace vlm

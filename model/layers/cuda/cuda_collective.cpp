#include "model/layers/cuda/cuda_collective.h"

#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"
#include "model/layers/cuda/cuda_step.h"

namespace vlm {
namespace {

class CudaCollective final : public Collective {
 public:
  explicit CudaCollective(Communicator& comm) : comm_(comm) {}

  void all_reduce_sum(Step& st, Act x) const override {
    CudaStep& s = CudaStep::of(st);
    comm_.all_reduce_sum(x.data, x.rows * x.cols, x.dtype, s.stream);
    s.mark("all_reduce");
  }

  // The ranks' blocks [N][R, Vl] into staging (one all-gather), then each block into its columns
  // of out (one strided copy per rank, on the stream: capturable).
  void gather_cols(Step& st, Act local, Act staging, Act out) const override {
    CudaStep& s = CudaStep::of(st);
    const int64_t n = comm_.size(), R = local.rows, Vl = local.cols;
    VLM_CHECK(local.dtype == out.dtype && staging.dtype == out.dtype && out.rows == R && out.cols == n * Vl &&
                  staging.rows * staging.cols >= R * n * Vl,
              "gather of [{}, {}] into [{}, {}]", R, Vl, out.rows, out.cols);
    if (R == 0) return;
    const size_t es = dtype_size(out.dtype);
    comm_.all_gather(local.data, staging.data, R * Vl, local.dtype, s.stream);
    for (int64_t r = 0; r < n; ++r)
      VLM_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(out.data) + static_cast<size_t>(r * Vl) * es,
                                       static_cast<size_t>(n * Vl) * es,
                                       static_cast<const char*>(staging.data) + static_cast<size_t>(r * R * Vl) * es,
                                       static_cast<size_t>(Vl) * es, static_cast<size_t>(Vl) * es, static_cast<size_t>(R),
                                       cudaMemcpyDeviceToDevice, s.stream));
    s.mark("gather_logits");
  }

 private:
  Communicator& comm_;
};

}  // namespace

std::unique_ptr<Collective> make_cuda_collective(Communicator& comm) { return std::make_unique<CudaCollective>(comm); }

}  // namespace vlm

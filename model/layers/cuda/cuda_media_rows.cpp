#include "model/layers/cuda/cuda_media_rows.h"

#include <cuda_runtime_api.h>

#include <vector>

#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"

namespace vlm {

void upload_media_rows(CudaStep& s, int64_t C, float* xp) {
  const int64_t T = s.T;
  const EmbeddingOverride& o = *s.override;
  const int64_t P = o.num_planes, W = P * C;  // a media row: its planes side by side
  VLM_CHECK(P >= 1, "media rows of {} planes", P);
  s.media_planes = nullptr;
  s.media_rows = nullptr;
  s.num_media_rows = 0;
  s.num_planes = P;
  struct Run {
    int64_t row;
    const float* src;  // [n, W]
    int64_t n;
    cudaMemcpyKind kind;
  };
  std::vector<Run> runs;
  int64_t M = 0;
  for (int64_t i = 0; i < o.num_device_runs; ++i) {  // media rows encoded on this GPU
    const DeviceRowRun& r = o.device_runs[i];
    VLM_CHECK(r.row >= 0 && r.n >= 0 && r.row + r.n <= T, "device embedding run [{}, +{}) of {} rows", r.row, r.n, T);
    runs.push_back({r.row, r.src, r.n, cudaMemcpyDeviceToDevice});
    M += r.n;
  }
  if (o.use != nullptr) {
    VLM_CHECK(o.embeds != nullptr, "embedding override without embeddings");
    for (int64_t t = 0; t < T;) {  // each run of host media rows in one copy (pageable memory)
      if (!o.use[t]) {
        ++t;
        continue;
      }
      int64_t e = t;
      while (e < T && o.use[e]) ++e;
      runs.push_back({t, o.embeds + t * W, e - t, cudaMemcpyHostToDevice});
      M += e - t;
      t = e;
    }
  }
  if (P == 1 || M == 0) {
    for (const Run& r : runs)
      VLM_CUDA_CHECK(cudaMemcpyAsync(xp + r.row * C, r.src, static_cast<size_t>(r.n * C) * 4, r.kind, s.stream));
    return;
  }
  // DeepStack: planes [M, W] f32, then the batch rows [M] int32.
  auto* planes = static_cast<float*>(s.scratch(CudaScratch::kMediaPlanes, M * W * 4 + M * 4));
  auto* rows_dev = reinterpret_cast<int32_t*>(planes + M * W);
  std::vector<int32_t> rows;  // [M]
  rows.reserve(static_cast<size_t>(M));
  for (const Run& r : runs) {
    float* dst = planes + static_cast<int64_t>(rows.size()) * W;
    VLM_CUDA_CHECK(cudaMemcpyAsync(dst, r.src, static_cast<size_t>(r.n * W) * 4, r.kind, s.stream));
    VLM_CUDA_CHECK(cudaMemcpy2DAsync(xp + r.row * C, static_cast<size_t>(C) * 4, dst, static_cast<size_t>(W) * 4,
                                     static_cast<size_t>(C) * 4, static_cast<size_t>(r.n), cudaMemcpyDeviceToDevice,
                                     s.stream));
    for (int64_t i = 0; i < r.n; ++i) rows.push_back(static_cast<int32_t>(r.row + i));
  }
  // Pageable memory: the copy has taken the ints when it returns.
  VLM_CUDA_CHECK(cudaMemcpyAsync(rows_dev, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice, s.stream));
  s.media_planes = planes;
  s.media_rows = rows_dev;
  s.num_media_rows = M;
}

}  // namespace vlm

// write_cudnn_seq_lens (contract in cudnn_seq_lens.h).
#include "kernels/cuda/attention/cudnn_seq_lens.h"

#include <cuda_runtime.h>

#include "kernels/cuda/core/cuda_check.h"

namespace vlm::cuda {
namespace {

__global__ void seq_lens_kernel(int32_t* seq_q, int32_t* seq_kv, int batch, int32_t real_q, int32_t real_kv) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < batch) {
    seq_q[i] = real_q;
    seq_kv[i] = real_kv;
  }
}

}  // namespace

void write_cudnn_seq_lens(int32_t* seq_q, int32_t* seq_kv, int batch, int32_t real_q, int32_t real_kv,
                          cudaStream_t stream) {
  seq_lens_kernel<<<(batch + 127) / 128, 128, 0, stream>>>(seq_q, seq_kv, batch, real_q, real_kv);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda

// The real sequence lengths a padded cuDNN attention plan reads at run time (cudnn_attention.h):
// two int32 device tensors [batch, 1, 1, 1], written on the stream by one tiny kernel so that no
// host buffer has to outlive the call (by-value kernel arguments) and nothing synchronizes.
#pragma once

#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace vlm::cuda {

// seq_q[0..batch) = real_q, seq_kv[0..batch) = real_kv (device pointers), enqueued on stream.
void write_cudnn_seq_lens(int32_t* seq_q, int32_t* seq_kv, int batch, int32_t real_q, int32_t real_kv,
                          cudaStream_t stream);

}  // namespace vlm::cuda

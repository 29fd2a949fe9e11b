// CudaDecoder::Graph: one captured decode step (cuda_decoder_graphs.cpp; the contract is in
// cuda_decoder.h). Internal to the two files of CudaDecoder.
#pragma once

#include <cuda_runtime.h>

#include "kernels/sink_router/sink_router_config.h"
#include "model/decoder/cuda/cuda_decoder.h"

namespace vlm {

// One captured decode step: sequences S (padded), context bucket, M-RoPE or not, SinkRouter
// routing or not (and its config: tau(L) and the layers are baked into the routing launches).
struct CudaDecoder::Graph {
  int64_t seqs = 0, context = 0;
  bool mrope = false;
  bool sink = false;
  SinkRouterConfig sink_config;
  int64_t epoch = -1;       // buffers_epoch_ at capture
  int64_t sink_epoch = -1;  // CudaSinkRouterStep::epoch() at capture
  int64_t last_use = 0;
  cudaGraphExec_t exec = nullptr;
  cuda::DeviceBuffer meta;  // ids, pos, mrope, slots, cu, ctx, tables, rows, routed flags (fixed layout)
  ~Graph() {
    if (exec) cudaGraphExecDestroy(exec);
  }
};

}  // namespace vlm

// Programmatic dependent launch (PDL, Hopper and later): a kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may start while the kernel before it on the
// stream still runs, once every CTA of that one has executed griddepcontrol.launch_dependents (or
// exited); it then runs its prologue (e.g. L2 prefetches of weights no kernel writes) and blocks in
// griddepcontrol.wait until the earlier grid has completed and its writes are visible. Under
// stream capture the edge between the two kernel nodes becomes a programmatic one (CUDA >= 12.3),
// so a decode step's CUDA graph gets the same overlap. What it saves at batch 1: each kernel
// boundary's drain, launch and ramp (a few microseconds, ~220 boundaries a Qwen3-8B step).
//
// The switch: PDL launches happen only inside a PdlScope that is on (thread-local; CudaDecoder
// opens one around a decode step's layers when CudaDecoderOptions::pdl resolves to on: -1 =
// VLM_CUDA_PDL, read once, unset = off: measured slower on the H200, session 16 call A) and only on a GPU and build where pdl_supported() holds;
// elsewhere the same kernels launch plainly (their griddepcontrol instructions are then no-ops),
// so results are bit-identical either way.
//
// The device side and the launcher are in pdl.cuh (.cu files only). Its rules, which every kernel
// launched through launch_pdl keeps:
//  - it executes pdl_wait() (in every thread, before any early return) before it reads anything an
//    earlier kernel of the step wrote and before it writes anything (an earlier kernel may still
//    read it); only reads of memory no kernel writes (weights, norm weights) may come before;
//  - so a kernel launched with the attribute always waits, and completion stays transitive: when
//    kernel n has completed, so has every kernel before it. Kernels launched plainly (memsets,
//    cuBLAS, kernels not written for PDL) keep full stream order in both directions.
#pragma once

#include <cstdint>

namespace vlm::cuda {

// Whether device `dev` runs PDL (compute capability >= 9.0) and this build's kernels carry the
// griddepcontrol instructions (compiled for sm_90 or later). Cached per process for device 0..15.
bool pdl_supported(int dev);

// VLM_CUDA_PDL (unset: off; 1 turns it on), read once.
bool pdl_env();

// Bytes of weights a PDL launch of a decode GEMV asks L2 for before its wait, spread over the rows
// its first pass reads (at most each row's length): VLM_CUDA_PDL_PREFETCH_MB (MiB, 0 = none,
// default 16), read once. A measuring knob; a hint only (no effect on results).
int64_t pdl_prefetch_bytes();

// While a scope that is on lives on this thread, launch_pdl launches with the attribute.
class PdlScope {
 public:
  explicit PdlScope(bool on);
  ~PdlScope();
  PdlScope(const PdlScope&) = delete;
  PdlScope& operator=(const PdlScope&) = delete;

 private:
  bool prev_;
};
bool pdl_active();

// Launches made with the attribute since the process started (tests: the switch took effect).
int64_t pdl_launches();
void note_pdl_launch();

}  // namespace vlm::cuda

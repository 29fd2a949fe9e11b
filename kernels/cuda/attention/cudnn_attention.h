// Dense causal (or full) attention through cuDNN 9's fused flash-attention engine, reached with
// the cuDNN backend (graph) API: the operation graph
//   S = Q·Kᵀ (f32) → S·scale → [causal: GEN_INDEX row/col, row >= col, BINARY_SELECT(S, lowest)]
//   → softmax (max, sub, exp, sum, log+max = stats, div; P in the I/O dtype) → O = P·V
// which the SDPA runtime-fusion engine recognizes. cuDNN is loaded at run time
// (cudnn_library.h); every failure (library absent, graph not finalized, no engine) is reported
// as text with cuDNN's status names and messages, never thrown, so a caller can fall back to
// paged_prefill_attention.
//
// Layout (no copies): q, out [batch * seq_q, H, D]; k, v [batch * seq_kv, Hkv, D]; sequences of
// equal length back to back (batch > 1: padded batches of one length). shape.row_stride > 0: the
// rows of q, k and v are row_stride elements apart instead (e.g. 3 H D: the q, k, v parts of a
// fused projection [T, 3, H, D] read in place); out stays contiguous. BF16 or F16 throughout
// (q, k, v, out one dtype); f32 accumulation and softmax. Query head h reads KV head
// h / (H / Hkv) (GQA). Causal is top-left aligned when seq_q == seq_kv (a first chunk with no
// cached context); for seq_q < seq_kv it is bottom-right aligned (row i sees keys
// [0, seq_kv - seq_q + i]), the alignment paged_prefill_attention uses.
//
// Padded shapes (shape.bottom_right, causal): one plan serves every (real_q <= seq_q, real_kv <=
// seq_kv) with real_q <= real_kv, the real lengths passed to run_padded(). They reach cuDNN as
// int32 device tensors [batch, 1, 1, 1] (written on the stream before each execution) that bound
// both GEMMs (M / N / K overrides: padded rows and keys cost no compute) and mask scores outside
// row < real_q && col < real_kv, then the causal comparison row + real_kv - real_q >= col: row
// i < real_q sees keys [0, real_kv - real_q + i], never a padded key. Rows >= real_q are
// padding: their output is unspecified (the caller ignores it). (An earlier version passed the
// lengths as by-value scalars: the engine took the offset from the dims instead, so results were
// wrong whenever real_kv - real_q != seq_kv - seq_q.)
//
// One plan per shape, built on first use and cached (with its workspace, allocated then); calls
// with a cached shape enqueue one cuDNN execution on `stream` and do not allocate. Not
// thread-safe: one CudnnAttention per thread / stream.
//
// Which candidate (finalized engine config) runs: heuristics' first unless options.config picks
// another, or options.autotune times them: on a shape's first run every candidate executes on the
// caller's buffers (1 warm-up + 3 timed, device events, the stream synchronized; inside a graph
// capture no timing: options.config's choice), the fastest is kept (logged) and the call's own
// execution follows with it, so its output is that candidate's (at 32K tokens ~0.5 s once per
// shape). Defaults read once per process: VLM_CUDNN_ATTENTION_AUTOTUNE (1 / on: on; unset: off)
// and VLM_CUDNN_ATTENTION_CONFIG=i (unset: 0). select() afterwards overrides both. Autotuning also
// takes heuristics mode B's configs as candidates (after mode A's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/core/dtype.h"

typedef struct CUstream_st* cudaStream_t;

namespace vlm::cuda {

struct CudnnAttentionShape {
  int batch = 1, seq_q = 0, seq_kv = 0, heads = 0, kv_heads = 0, head_dim = 0;
  bool causal = true;
  bool bottom_right = false;  // causal with the offset from run()'s real lengths (padded shapes)
  DType dtype = DType::BF16;
  int64_t row_stride = 0;  // elements between rows of q, k and v (0: H * D and Hkv * D)
  auto key() const {
    return std::make_tuple(batch, seq_q, seq_kv, heads, kv_heads, head_dim, causal, bottom_right, int(dtype),
                           row_stride);
  }
  bool operator<(const CudnnAttentionShape& o) const { return key() < o.key(); }
};

// How the plan is chosen (benchmarks and the probe try several).
struct CudnnAttentionOptions {
  int heur_mode = 3;           // CUDNN_HEUR_MODE_A (3), B (1) or FALLBACK (2)
  bool stats_output = false;   // softmax stats as a real f32 output [b, H, s_q] (some engines want it)
  int max_configs = 8;         // engine configs finalized per shape (candidates for select())
  // First run of a shape: -1 = VLM_CUDNN_ATTENTION_AUTOTUNE (unset: off), 0 off, 1 time every
  // candidate and keep the fastest.
  int autotune = -1;
  // Candidates also from heuristics mode B (after heur_mode's, up to max_configs more); on
  // whenever autotune is.
  bool both_heuristics = false;
  // Candidate run when not autotuning: -2 = VLM_CUDNN_ATTENTION_CONFIG (unset: 0), else that
  // index (past the last candidate: the last).
  int config = -2;
};

class CudnnAttention {
 public:
  explicit CudnnAttention(CudnnAttentionOptions opts = {});
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // cuDNN loaded and a handle created; else false with *why.
  bool available(std::string* why = nullptr) const;
  // Whether the shape is one this class builds graphs for (dtype, head_dim % 8, heads % kv_heads).
  static bool supports(const CudnnAttentionShape& s, std::string* why = nullptr);

  // Builds (or finds) the plan for the shape: true when some engine config finalized.
  bool prepare(const CudnnAttentionShape& s, std::string* why = nullptr);
  // Runs it (prepare first if needed). scale multiplies q·k. False (with *why) when cuDNN is
  // absent, the shape is unsupported, no plan finalized, or execution failed.
  bool run(const CudnnAttentionShape& s, const void* q, const void* k, const void* v, void* out, float scale,
           cudaStream_t stream, std::string* why = nullptr);
  // A padded shape (s.bottom_right): the real lengths set the causal offset (real_kv - real_q);
  // needs 0 < real_q <= s.seq_q, real_q <= real_kv <= s.seq_kv (false with *why otherwise).
  bool run_padded(const CudnnAttentionShape& s, int real_q, int real_kv, const void* q, const void* k, const void* v,
                  void* out, float scale, cudaStream_t stream, std::string* why = nullptr);

  // Candidates of a prepared shape (finalized engine configs, heuristics order) and the one run()
  // uses (default 0); select() changes it (benchmarks time each).
  int num_candidates(const CudnnAttentionShape& s) const;
  void select(const CudnnAttentionShape& s, int i);
  // The candidate run() uses now (-1: shape not prepared); before the first run it is 0 unless
  // select() chose, the autotune / config choice being made on that run.
  int selected(const CudnnAttentionShape& s) const;
  // Autotune's per-candidate times of a shape (ms; empty when it did not run; a candidate that
  // failed to execute: infinity).
  std::vector<float> autotune_ms(const CudnnAttentionShape& s) const;
  // What happened while building the shape's plan: per step, status names and messages.
  std::string log(const CudnnAttentionShape& s) const;
  // cuDNN's version (e.g. 91900) and the library path; 0 / "" when absent.
  size_t version() const;
  std::string library_path() const;

  struct Plan;  // descriptors, workspace, candidates (cudnn_attention.cpp)

 private:
  Plan* find_or_build(const CudnnAttentionShape& s);
  // One execution of candidate i of a prepared plan; 0 or cuDNN's status (*why set).
  int execute(const CudnnAttentionShape& s, Plan& p, int i, int real_q, int real_kv, const void* q, const void* k,
              const void* v, void* out, float scale, cudaStream_t stream, std::string* why);
  // The first run's choice (options.autotune / options.config), once per plan.
  void choose(const CudnnAttentionShape& s, Plan& p, int real_q, int real_kv, const void* q, const void* k,
              const void* v, void* out, float scale, cudaStream_t stream);
  CudnnAttentionOptions opts_;
  bool tune_ = false;  // opts_.autotune resolved (the environment read once)
  void* handle_ = nullptr;
  std::string unavailable_;
  std::map<CudnnAttentionShape, std::unique_ptr<Plan>> plans_;
};

}  // namespace vlm::cuda

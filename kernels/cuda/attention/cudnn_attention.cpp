// CudnnAttention: the SDPA operation graph written with cuDNN's backend descriptors (contract in
// cudnn_attention.h). The graph follows the pattern NVIDIA documents for the fused flash-attention
// fprop engine (cuDNN developer guide, "Graph API" / "Fused Flash Attention fprop"): two matmuls,
// a by-value scale, the causal mask as GEN_INDEX + CMP_GE + BINARY_SELECT, the softmax spelled as
// reductions and pointwise ops with the log-sum-exp statistics, P in the I/O dtype for the second
// matmul.
#include "kernels/cuda/attention/cudnn_attention.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/core/env_switch.h"
#include "kernels/core/log.h"
#include "kernels/cuda/attention/cudnn_graph_builder.h"
#include "kernels/cuda/attention/cudnn_library.h"
#include "kernels/cuda/attention/cudnn_seq_lens.h"

namespace vlm::cuda {

struct CudnnAttention::Plan {
  std::unique_ptr<CudnnGraphBuilder> graph;  // owns every descriptor
  std::vector<CudnnApi::Desc> plans;         // finalized execution plans (candidates)
  std::vector<int64_t> workspace;            // bytes per candidate
  int selected = 0;
  bool chosen = false;          // the first run's choice made (or select() called)
  std::vector<float> tuned_ms;  // autotune's per-candidate times
  void* workspace_ptr = nullptr;
  void* stats_ptr = nullptr;  // f32 [b, H, s_q] when opts.stats_output
  std::string log;
  float scale = 1.f;
  float lowest = std::numeric_limits<float>::lowest();
  int32_t seq_q = 0, seq_kv = 0;  // by-value dims (exact shapes with seq_q != seq_kv)
  int32_t* seq_lens = nullptr;    // padded shapes: device seq_q [b] then seq_kv [b] (int32)
  ~Plan() {
    if (seq_lens != nullptr) cudaFree(seq_lens);
    if (workspace_ptr != nullptr) cudaFree(workspace_ptr);
    if (stats_ptr != nullptr) cudaFree(stats_ptr);
  }
};

namespace {

// Unique ids of the real tensors (the variant pack's keys).
enum Uid : int64_t { kQ = 1, kK = 2, kV = 3, kO = 4, kStats = 5, kScale = 6, kLowest = 7, kSkv = 8, kSq = 9 };

// Builds the graph's operations into g; returns the operation descriptors.
std::vector<CudnnApi::Desc> sdpa_ops(CudnnGraphBuilder& g, const CudnnAttentionShape& s, bool stats_output) {
  using B = CudnnGraphBuilder;
  const int64_t b = s.batch, h = s.heads, hk = s.kv_heads, sq = s.seq_q, skv = s.seq_kv, d = s.head_dim;
  const int io = s.dtype == DType::F16 ? B::kHalf : B::kBf16;
  // q, out [b*sq, h, d] as [b, h, sq, d]; k [b*skv, hk, d] as Kᵀ [b, hk, d, skv]; v as [b, hk, skv, d].
  // Row strides: contiguous rows, or s.row_stride apart (a fused [T, 3, H, D] projection).
  const int64_t rq = s.row_stride > 0 ? s.row_stride : h * d, rk = s.row_stride > 0 ? s.row_stride : hk * d;
  auto q = g.tensor(kQ, io, {b, h, sq, d}, {sq * rq, d, rq, 1});
  auto kt = g.tensor(kK, io, {b, hk, d, skv}, {skv * rk, d, 1, rk});
  auto v = g.tensor(kV, io, {b, hk, skv, d}, {skv * rk, d, rk, 1});
  auto o = g.tensor(kO, io, {b, h, sq, d}, {sq * h * d, d, h * d, 1});
  const std::vector<int64_t> sdim = {b, h, sq, skv}, sstr = {h * sq * skv, sq * skv, skv, 1};
  const std::vector<int64_t> rdim = {b, h, sq, 1}, rstr = {h * sq, sq, 1, 1};
  const std::vector<int64_t> one = {1, 1, 1, 1};
  std::vector<CudnnApi::Desc> ops;

  // Padded shapes: the real lengths as int32 device tensors [b, 1, 1, 1] that bound both GEMMs
  // (M / N / K overrides) and the masks, the pattern of cuDNN's padding mask with a bottom-right
  // diagonal. (By-value scalars there are not honoured at run time: the engine derives the
  // bottom-right offset from the dims, which is right for exact shapes only.)
  const bool padded = s.bottom_right;
  CudnnApi::Desc sq_t = nullptr, skv_t = nullptr;
  if (padded) {
    sq_t = g.tensor(kSq, B::kInt32, {b, 1, 1, 1}, {1, 1, 1, 1});
    skv_t = g.tensor(kSkv, B::kInt32, {b, 1, 1, 1}, {1, 1, 1, 1});
  }
  auto s0 = g.virt(B::kFloat, sdim, sstr);
  ops.push_back(g.matmul(q, kt, s0, sq_t, skv_t));
  auto scale = g.tensor(kScale, B::kFloat, one, one, /*by_value=*/true);
  auto s1 = g.virt(B::kFloat, sdim, sstr);
  ops.push_back(g.pointwise(B::kMul, B::kFloat, s0, scale, s1));
  auto last = s1;
  CudnnApi::Desc lowest = nullptr;
  if (s.causal) lowest = g.tensor(kLowest, B::kFloat, one, one, true);
  if (padded) {  // keep row < seq_q[b] && col < seq_kv[b]
    auto row = g.virt(B::kInt32, sdim, sstr), col = g.virt(B::kInt32, sdim, sstr);
    ops.push_back(g.pointwise(B::kGenIndex, B::kInt32, last, nullptr, row, nullptr, /*axis=*/2));
    ops.push_back(g.pointwise(B::kGenIndex, B::kInt32, last, nullptr, col, nullptr, /*axis=*/3));
    auto row_ok = g.virt(B::kBool, sdim, sstr), col_ok = g.virt(B::kBool, sdim, sstr);
    ops.push_back(g.pointwise(B::kCmpLt, B::kBool, row, sq_t, row_ok));
    ops.push_back(g.pointwise(B::kCmpLt, B::kBool, col, skv_t, col_ok));
    auto ok = g.virt(B::kBool, sdim, sstr);
    ops.push_back(g.pointwise(B::kLogicalAnd, B::kBool, row_ok, col_ok, ok));
    auto masked = g.virt(B::kFloat, sdim, sstr);
    ops.push_back(g.pointwise(B::kBinarySelect, B::kFloat, last, lowest, masked, ok));
    last = masked;
  }
  if (s.causal) {
    auto row = g.virt(B::kInt32, sdim, sstr);
    ops.push_back(g.pointwise(B::kGenIndex, B::kInt32, last, nullptr, row, nullptr, /*axis=*/2));
    if (sq != skv || padded) {  // bottom-right: row + skv - sq (padded: the device lengths; else by-value dims)
      auto skv_b = padded ? skv_t : g.tensor(kSkv, B::kInt32, one, one, true);
      auto sq_b = padded ? sq_t : g.tensor(kSq, B::kInt32, one, one, true);
      auto r1 = g.virt(B::kInt32, sdim, sstr);
      ops.push_back(g.pointwise(B::kAdd, B::kInt32, row, skv_b, r1));
      auto r2 = g.virt(B::kInt32, sdim, sstr);
      ops.push_back(g.pointwise(B::kSub, B::kInt32, r1, sq_b, r2));
      row = r2;
    }
    auto col = g.virt(B::kInt32, sdim, sstr);
    ops.push_back(g.pointwise(B::kGenIndex, B::kInt32, last, nullptr, col, nullptr, /*axis=*/3));
    auto keep = g.virt(B::kBool, sdim, sstr);
    ops.push_back(g.pointwise(B::kCmpGe, B::kBool, row, col, keep));
    auto masked = g.virt(B::kFloat, sdim, sstr);
    ops.push_back(g.pointwise(B::kBinarySelect, B::kFloat, last, lowest, masked, keep));
    last = masked;
  }
  // softmax with statistics
  auto mx = g.virt(B::kFloat, rdim, rstr);
  ops.push_back(g.reduction(B::kReduceMax, last, mx));
  auto sub = g.virt(B::kFloat, sdim, sstr);
  ops.push_back(g.pointwise(B::kSub, B::kFloat, last, mx, sub));
  auto ex = g.virt(B::kFloat, sdim, sstr);
  ops.push_back(g.pointwise(B::kExp, B::kFloat, sub, nullptr, ex));
  auto sum = g.virt(B::kFloat, rdim, rstr);
  ops.push_back(g.reduction(B::kReduceAdd, ex, sum));
  auto lg = g.virt(B::kFloat, rdim, rstr);
  ops.push_back(g.pointwise(B::kLog, B::kFloat, sum, nullptr, lg));
  auto stats = stats_output ? g.tensor(kStats, B::kFloat, rdim, rstr) : g.virt(B::kFloat, rdim, rstr);
  ops.push_back(g.pointwise(B::kAdd, B::kFloat, mx, lg, stats));
  auto p = g.virt(io, sdim, sstr);  // bmm2's A in the I/O dtype (the engine requires it)
  ops.push_back(g.pointwise(B::kDiv, B::kFloat, ex, sum, p));
  ops.push_back(g.matmul(p, v, o, sq_t, nullptr, skv_t));
  return ops;
}

// The process-wide defaults of CudnnAttentionOptions' autotune / config (read once).
bool env_autotune() {
  static const bool on = env_switch("VLM_CUDNN_ATTENTION_AUTOTUNE", false);
  return on;
}

int env_config() {
  static const int i = [] {
    const char* e = std::getenv("VLM_CUDNN_ATTENTION_CONFIG");
    return e != nullptr && *e != '\0' ? std::max(0, std::atoi(e)) : 0;
  }();
  return i;
}

}  // namespace

CudnnAttention::CudnnAttention(CudnnAttentionOptions opts)
    : opts_(opts), tune_(opts.autotune < 0 ? env_autotune() : opts.autotune != 0) {
  std::string why;
  const CudnnApi* api = cudnn_api(&why);
  if (api == nullptr) {
    unavailable_ = why;
    return;
  }
  const CudnnApi::Status st = api->Create(&handle_);
  if (st != 0) {
    unavailable_ = "cudnnCreate: " + api->describe(st);
    handle_ = nullptr;
  }
}

CudnnAttention::~CudnnAttention() {
  plans_.clear();
  if (handle_ != nullptr) cudnn_api()->Destroy(handle_);
}

bool CudnnAttention::available(std::string* why) const {
  if (why != nullptr) *why = unavailable_;
  return handle_ != nullptr;
}

size_t CudnnAttention::version() const { return handle_ != nullptr ? cudnn_api()->GetVersion() : 0; }

std::string CudnnAttention::library_path() const {
  std::string where;
  cudnn_api(nullptr, &where);
  return where;
}

bool CudnnAttention::supports(const CudnnAttentionShape& s, std::string* why) {
  std::string w;
  if (s.dtype != DType::BF16 && s.dtype != DType::F16) w = "dtype must be BF16 or F16";
  else if (s.head_dim <= 0 || s.head_dim % 8 != 0 || s.head_dim > 256) w = "head_dim must be a multiple of 8 up to 256";
  else if (s.kv_heads <= 0 || s.heads % s.kv_heads != 0) w = "heads must be a multiple of kv_heads";
  else if (s.seq_q <= 0 || s.seq_kv < s.seq_q || s.batch <= 0) w = "need 0 < seq_q <= seq_kv and batch > 0";
  else if (s.bottom_right && !s.causal) w = "bottom_right needs causal";
  else if (s.row_stride != 0 && (s.row_stride < int64_t(s.heads) * s.head_dim || s.row_stride % 8 != 0))
    w = "row_stride must be 0 or a multiple of 8 of at least H * D";
  if (why != nullptr) *why = w;
  return w.empty();
}

CudnnAttention::Plan* CudnnAttention::find_or_build(const CudnnAttentionShape& s) {
  auto it = plans_.find(s);
  if (it != plans_.end()) return it->second.get();
  auto plan = std::make_unique<Plan>();
  Plan& p = *plan;
  p.seq_q = s.seq_q;
  p.seq_kv = s.seq_kv;
  const CudnnApi& api = *cudnn_api();
  p.graph = std::make_unique<CudnnGraphBuilder>(api, handle_);
  CudnnGraphBuilder& g = *p.graph;
  try {
    const std::vector<CudnnApi::Desc> ops = sdpa_ops(g, s, opts_.stats_output);
    CudnnApi::Desc graph = g.operation_graph(ops);
    g.note("operation graph finalized (" + std::to_string(ops.size()) + " ops)");
    std::vector<CudnnApi::Desc> configs = g.heuristic_configs(graph, opts_.heur_mode);
    if (configs.empty()) configs = g.global_configs(graph);
    auto add = [&](const std::vector<CudnnApi::Desc>& list, const std::string& tag) {
      const size_t cap = p.plans.size() + size_t(opts_.max_configs);
      for (size_t i = 0; i < list.size() && p.plans.size() < cap; ++i) {
        int64_t ws = 0;
        CudnnApi::Desc pl = g.execution_plan(list[i], &ws, tag + "config " + std::to_string(i));
        if (pl == nullptr) continue;
        p.plans.push_back(pl);
        p.workspace.push_back(ws);
      }
    };
    add(configs, "");
    if ((tune_ || opts_.both_heuristics) && opts_.heur_mode != 1) {
      g.note("candidate " + std::to_string(p.plans.size()) + " on: heuristics mode B's");
      add(g.heuristic_configs(graph, 1), "mode B ");
    }
  } catch (const std::exception& e) {
    g.note(std::string("failed: ") + e.what());
  }
  if (!p.plans.empty()) {
    const int64_t ws = *std::max_element(p.workspace.begin(), p.workspace.end());
    if (ws > 0 && cudaMalloc(&p.workspace_ptr, size_t(ws)) != cudaSuccess) {
      g.note("cudaMalloc of the " + std::to_string(ws) + "-byte workspace failed");
      p.plans.clear();
    }
    if (s.bottom_right && cudaMalloc(&p.seq_lens, 2 * size_t(s.batch) * sizeof(int32_t)) != cudaSuccess) {
      g.note("cudaMalloc of the sequence lengths failed");
      p.plans.clear();
    }
    if (opts_.stats_output &&
        cudaMalloc(&p.stats_ptr, size_t(s.batch) * s.heads * s.seq_q * sizeof(float)) != cudaSuccess) {
      g.note("cudaMalloc of the stats output failed");
      p.plans.clear();
    }
  } else {
    g.note("no engine config finalized into an execution plan");
  }
  p.log = g.log();
  Plan* raw = plan.get();
  plans_.emplace(s, std::move(plan));
  return raw;
}

bool CudnnAttention::prepare(const CudnnAttentionShape& s, std::string* why) {
  std::string w;
  if (!available(&w) || !supports(s, &w)) {
    if (why != nullptr) *why = w;
    return false;
  }
  Plan* p = find_or_build(s);
  if (p->plans.empty() && why != nullptr) *why = p->log;
  return !p->plans.empty();
}

bool CudnnAttention::run(const CudnnAttentionShape& s, const void* q, const void* k, const void* v, void* out,
                         float scale, cudaStream_t stream, std::string* why) {
  return run_padded(s, s.seq_q, s.seq_kv, q, k, v, out, scale, stream, why);
}

bool CudnnAttention::run_padded(const CudnnAttentionShape& s, int real_q, int real_kv, const void* q, const void* k,
                                const void* v, void* out, float scale, cudaStream_t stream, std::string* why) {
  if (real_q <= 0 || real_q > s.seq_q || real_kv < real_q || real_kv > s.seq_kv ||
      (!s.bottom_right && (real_q != s.seq_q || real_kv != s.seq_kv))) {
    if (why != nullptr)
      *why = "real lengths " + std::to_string(real_q) + " / " + std::to_string(real_kv) + " outside the shape " +
             std::to_string(s.seq_q) + " / " + std::to_string(s.seq_kv);
    return false;
  }
  if (!prepare(s, why)) return false;
  Plan& p = *plans_.at(s);
  if (!p.chosen) choose(s, p, real_q, real_kv, q, k, v, out, scale, stream);
  return execute(s, p, p.selected, real_q, real_kv, q, k, v, out, scale, stream, why) == 0;
}

int CudnnAttention::execute(const CudnnAttentionShape& s, Plan& p, int i, int real_q, int real_kv, const void* q,
                            const void* k, const void* v, void* out, float scale, cudaStream_t stream,
                            std::string* why) {
  const CudnnApi& api = *cudnn_api();
  CudnnApi::Status st = api.SetStream(handle_, stream);
  if (st != 0) {
    if (why != nullptr) *why = "cudnnSetStream: " + api.describe(st);
    return int(st);
  }
  p.scale = scale;
  std::vector<int64_t> uids = {kQ, kK, kV, kO, kScale};
  std::vector<void*> ptrs = {const_cast<void*>(q), const_cast<void*>(k), const_cast<void*>(v), out, &p.scale};
  if (s.causal) {
    uids.push_back(kLowest);
    ptrs.push_back(&p.lowest);
  }
  if (s.bottom_right) {  // the real lengths, written on the stream before the execution
    write_cudnn_seq_lens(p.seq_lens, p.seq_lens + s.batch, s.batch, real_q, real_kv, stream);
    uids.insert(uids.end(), {kSq, kSkv});
    ptrs.insert(ptrs.end(), {p.seq_lens, p.seq_lens + s.batch});
  } else if (s.causal && s.seq_q != s.seq_kv) {
    uids.insert(uids.end(), {kSkv, kSq});
    ptrs.insert(ptrs.end(), {&p.seq_kv, &p.seq_q});
  }
  if (opts_.stats_output) {
    uids.push_back(kStats);
    ptrs.push_back(p.stats_ptr);
  }
  std::string err;
  CudnnApi::Desc pack = p.graph->variant_pack(uids, ptrs, p.workspace_ptr, &err);
  if (pack == nullptr) {
    if (why != nullptr) *why = "variant pack: " + err;
    return -1;
  }
  st = api.BackendExecute(handle_, p.plans[size_t(i)], pack);
  p.graph->destroy(pack);
  if (st != 0 && why != nullptr) *why = "cudnnBackendExecute: " + api.describe(st);
  return int(st);
}

void CudnnAttention::choose(const CudnnAttentionShape& s, Plan& p, int real_q, int real_kv, const void* q,
                            const void* k, const void* v, void* out, float scale, cudaStream_t stream) {
  p.chosen = true;
  const int n = int(p.plans.size());
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess) cudaGetLastError();
  if (!tune_ || n < 2 || capturing != cudaStreamCaptureStatusNone) {  // (no timing inside a capture)
    p.selected = std::min(opts_.config < -1 ? env_config() : std::max(opts_.config, 0), n - 1);
    return;
  }
  cudaEvent_t a = nullptr, b = nullptr;
  if (cudaEventCreate(&a) != cudaSuccess || cudaEventCreate(&b) != cudaSuccess) {
    cudaGetLastError();
    if (a != nullptr) cudaEventDestroy(a);
    return;  // keep candidate 0
  }
  constexpr int kTimed = 3;
  p.tuned_ms.assign(size_t(n), std::numeric_limits<float>::infinity());
  std::string text;
  for (int i = 0; i < n; ++i) {
    bool ok = execute(s, p, i, real_q, real_kv, q, k, v, out, scale, stream, nullptr) == 0;  // warm-up
    ok = ok && cudaEventRecord(a, stream) == cudaSuccess;
    for (int r = 0; ok && r < kTimed; ++r) ok = execute(s, p, i, real_q, real_kv, q, k, v, out, scale, stream, nullptr) == 0;
    ok = ok && cudaEventRecord(b, stream) == cudaSuccess && cudaEventSynchronize(b) == cudaSuccess;
    float ms = 0;
    if (ok && cudaEventElapsedTime(&ms, a, b) == cudaSuccess) p.tuned_ms[size_t(i)] = ms / kTimed;
    cudaGetLastError();
    text += " " + std::to_string(i) + ": " + std::to_string(p.tuned_ms[size_t(i)]) + " ms";
  }
  p.selected = int(std::min_element(p.tuned_ms.begin(), p.tuned_ms.end()) - p.tuned_ms.begin());
  if (!std::isfinite(p.tuned_ms[size_t(p.selected)])) p.selected = 0;
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  VLM_LOG_INFO("cuDNN attention autotune for {} queries over {} keys (batch {}):{} -> config {}", s.seq_q, s.seq_kv,
               s.batch, text, p.selected);
}

int CudnnAttention::num_candidates(const CudnnAttentionShape& s) const {
  auto it = plans_.find(s);
  return it == plans_.end() ? 0 : int(it->second->plans.size());
}

void CudnnAttention::select(const CudnnAttentionShape& s, int i) {
  auto it = plans_.find(s);
  if (it != plans_.end() && i >= 0 && i < int(it->second->plans.size())) {
    it->second->selected = i;
    it->second->chosen = true;
  }
}

int CudnnAttention::selected(const CudnnAttentionShape& s) const {
  auto it = plans_.find(s);
  return it == plans_.end() || it->second->plans.empty() ? -1 : it->second->selected;
}

std::vector<float> CudnnAttention::autotune_ms(const CudnnAttentionShape& s) const {
  auto it = plans_.find(s);
  return it == plans_.end() ? std::vector<float>() : it->second->tuned_ms;
}

std::string CudnnAttention::log(const CudnnAttentionShape& s) const {
  auto it = plans_.find(s);
  return it == plans_.end() ? std::string("(not built)") : it->second->log;
}

}  // namespace vlm::cuda

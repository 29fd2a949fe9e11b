#include "model/layers/cuda/cuda_sparse_prefill.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/core/check.h"
#include "kernels/core/thread_pool.h"
#include "kernels/sparse_prefill/a_shape.h"
#include "kernels/sparse_prefill/rank_head_patterns.h"

namespace vlm {
namespace {

bool same_grid(const GridParams& a, const GridParams& b) {
  return a.stride == b.stride && a.use_hline == b.use_hline && a.use_vline == b.use_vline &&
         a.use_slash == b.use_slash && a.min_stride == b.min_stride && a.max_stride == b.max_stride &&
         a.band == b.band && a.num_vlines == b.num_vlines && a.num_hlines == b.num_hlines && a.n_init == b.n_init &&
         a.last_q == b.last_q;
}

int q_len_of(const ForwardBatch& b, int s) { return b.cu_seqlens_q[s + 1] - b.cu_seqlens_q[s]; }

bool sparse_here(const ForwardBatch& b, int s) {
  return s < static_cast<int>(b.sparse_prefill.size()) && b.sparse_prefill[s].enabled() && q_len_of(b, s) > 1;
}

int g_plan_ahead = -1;  // set_sparse_plan_ahead (-1: the environment's)

}  // namespace

void set_sparse_plan_ahead(bool on) { g_plan_ahead = on ? 1 : 0; }

bool CudaSparsePrefill::plan_ahead_wanted() {
  static const bool env = [] {
    const char* e = std::getenv("VLM_CUDA_SPARSE_PLAN_AHEAD");
    return !(e && std::string(e) == "0");
  }();
  return g_plan_ahead < 0 ? env : g_plan_ahead == 1;
}

CudaSparsePrefill::~CudaSparsePrefill() {
  if (side_) cudaStreamSynchronize(side_);
  for (cudaEvent_t e : {go_, ready_[0], ready_[1]})
    if (e) cudaEventDestroy(e);
  if (side_) cudaStreamDestroy(side_);
}

bool CudaSparsePrefill::device_grid_heads(const std::vector<HeadPattern>& pats) {
  for (const HeadPattern& pt : pats)
    if (pt.type != HeadPatternType::Grid || pt.boundary != BoundaryKind::None || !same_grid(pt.grid, pats[0].grid) ||
        pt.grid.num_vlines > cuda::kGridPlanMaxLines || pt.grid.max_stride > cuda::kGridPlanMaxStride)
      return false;
  return !pats.empty();
}

void CudaSparsePrefill::plan_ahead(int layer, const ForwardBatch& b, int H, unsigned long long* acc) {
  const int next = layer + 1;
  const SparsePrefillConfig& cfg = b.sparse_prefill[0];
  GridLayoutStore* store = cfg.grid_search_once && !b.grid_layouts.empty() ? b.grid_layouts[0] : nullptr;
  if (!store || !grid_store_has(*store, next, total_heads(H)))
    return;  // not stored: the next layer searches (or there is none)
  const std::vector<HeadPattern> pats = head_patterns(next, cfg, H);
  if (!device_grid_heads(pats)) return;  // the next layer takes another path
  const std::vector<GridLayout> layouts = grid_store_slice(*store, next, head_begin_, H);
  for (const GridLayout& l : layouts)
    if (l.stride > cuda::kGridPlanMaxStride) return;
  // The side stream starts where this layer's kernel starts (go_): the other buffer's last
  // reader, the previous layer's kernel and combine, is done then.
  const int buf = next & 1;
  VLM_CUDA_CHECK(cudaStreamWaitEvent(side_, go_, 0));
  ahead_ = {next, b.cu_seqlens_q[0], q_len_of(b, 0), b.context_lens[0]};
  device_plans_[buf].build(layouts, pats[0].grid, ahead_.t0, ahead_.q_len, ahead_.num_keys, side_, acc, next);
  VLM_CUDA_CHECK(cudaEventRecord(ready_[buf], side_));
  pending_[buf] = true;
}

bool CudaSparsePrefill::active(const ForwardBatch& b) {
  for (int s = 0; s < b.num_seqs(); ++s)
    if (sparse_here(b, s)) return true;
  return false;
}

void CudaSparsePrefill::check_config(const SparsePrefillConfig& cfg) {
  if (!plannable_without_host_data(cfg))
    throw RequestError(400, "invalid_request_error",
                       fmt::format("sparse prefill method {} (or its head patterns) does not run on the GPU: its "
                                   "estimates take at most 64 rows (last_q), XAttention a stride dividing 64 and no "
                                   "boundary",
                                   sparse_prefill_method_name(cfg.method)),
                       "vlm_options");
  if (cfg.block != 64)
    throw RequestError(400, "invalid_request_error",
                       fmt::format("sparse prefill on the GPU plans 64-token blocks, not {}", cfg.block), "vlm_options");
}

std::vector<HeadPattern> CudaSparsePrefill::head_patterns(int layer, const SparsePrefillConfig& cfg, int H) const {
  return rank_head_patterns(cfg, layer, head_begin_, H);  // the model's heads' patterns (tensor parallelism)
}

void CudaSparsePrefill::commit_layouts() {
  for (const PendingLayouts& p : pending_layouts_) grid_store_put(*p.store, p.layer, head_begin_, total_heads_, p.layouts);
  pending_layouts_.clear();
}

std::vector<GridLayout> CudaSparsePrefill::grid_layouts(int layer, const ForwardBatch& b, int s,
                                                        const std::vector<HeadPattern>& pats, const void* q,
                                                        DType act, const PagedKVLayer& kv,
                                                        const cuda::CudaAttentionBatch& meta, float scale,
                                                        cudaStream_t stream) {
  // One device search per distinct grid parameter set (every head searched; MMInference's
  // default head makes it one).
  const int H = static_cast<int>(pats.size()), q_len = q_len_of(b, s);
  GridLayoutStore* store = b.sparse_prefill[s].grid_search_once && s < static_cast<int>(b.grid_layouts.size())
                               ? b.grid_layouts[s]
                               : nullptr;
  const int total = total_heads(H);
  if (store && grid_store_has(*store, layer, total)) return grid_store_slice(*store, layer, head_begin_, H);
  std::vector<GridLayout> layouts(H);
  std::vector<uint8_t> done(H, 0);
  const std::span<const int32_t> known =
      s < static_cast<int>(b.frame_strides.size()) ? b.frame_strides[s] : std::span<const int32_t>();
  for (int h = 0; h < H; ++h) {
    if (pats[h].type != HeadPatternType::Grid || done[h]) continue;
    cuda::GridEstimateShape sh;
    sh.num_heads = H;
    sh.t0 = b.cu_seqlens_q[s];
    sh.q_len = q_len;
    sh.num_keys = b.context_lens[s];
    sh.rows = std::min(pats[h].grid.last_q, q_len);
    const auto found = grid_.search(q, act, kv, meta.block_tables + static_cast<int64_t>(s) * meta.max_blocks_per_seq,
                                    sh, scale, pats[h].grid, known, stream);
    for (int g = h; g < H; ++g)
      if (pats[g].type == HeadPatternType::Grid && !done[g] && same_grid(pats[g].grid, pats[h].grid))
        layouts[g] = found[g], done[g] = 1;
  }
  if (store && total == H) grid_store_put(*store, layer, 0, H, layouts);  // one GPU: stored now
  else if (store) pending_layouts_.push_back({store, layer, layouts});  // tensor parallelism: commit_layouts()
  return layouts;
}

BlockSparsePlan CudaSparsePrefill::plan_sequence(int layer, const ForwardBatch& b, int s, const void* q, DType act,
                                                 int H, const PagedKVLayer& kv, const cuda::CudaAttentionBatch& meta,
                                                 float scale, cudaStream_t stream) {
  const SparsePrefillConfig& cfg = b.sparse_prefill[s];
  check_config(cfg);
  const int q_len = q_len_of(b, s), N = b.context_lens[s], blk = cfg.block;
  const int prompt_len = std::max(b.prompt_lens.empty() ? N : b.prompt_lens[s], N);
  BlockSparsePlan p;
  p.q_len = q_len;
  p.num_keys = N;
  p.block_m = p.block_n = blk;
  if (cfg.method == SparsePrefillMethod::AShape) {
    p.heads.assign(H, a_shape_head_plan(q_len, N, blk, cfg.n_init, cfg.n_local));
    return p;
  }
  if (cfg.method == SparsePrefillMethod::TriShape) {
    p.heads.assign(H, tri_shape_head_plan(q_len, N, blk, cfg.n_init, cfg.n_local, cfg.n_last, prompt_len));
    return p;
  }
  const std::vector<HeadPattern> pats = head_patterns(layer, cfg, H);
  p.heads.resize(H);
  std::vector<uint8_t> planned(H, 0);  // the vertical-slash and boundary heads (CudaLineHeads)
  lines_.load_codes(b, s);
  lines_.plan(b, s, pats, q, act, kv, meta, scale, stream, p.heads, planned);
  const std::vector<GridLayout> layouts = grid_layouts(layer, b, s, pats, q, act, kv, meta, scale, stream);
  std::vector<HeadPlan> xplans = xattn_.host_plans(b, s, pats, q, act, kv, meta, scale, stream);
  global_thread_pool().run_tasks(H, [&](int64_t h) {
    const HeadPattern& pt = pats[h];
    if (planned[h]) return;
    if (pt.type == HeadPatternType::Grid) p.heads[h] = grid_head_plan(layouts[h], pt.grid, q_len, N, blk);
    else if (pt.type == HeadPatternType::AShape) p.heads[h] = a_shape_head_plan(q_len, N, blk, pt.n_init, pt.n_local);
    else if (pt.type == HeadPatternType::XAttention) p.heads[h] = std::move(xplans[h]);
    else p.heads[h] = dense_head_plan(q_len, N, blk, blk);
  });
  return p;
}

bool CudaSparsePrefill::device_planned(int layer, const ForwardBatch& b, const void* q, DType act, int H,
                                       const PagedKVLayer& kv, const cuda::CudaAttentionBatch& meta, float scale,
                                       void* out, cudaStream_t stream) {
  if (b.num_seqs() != 1 || !sparse_here(b, 0)) return false;
  const SparsePrefillConfig& cfg = b.sparse_prefill[0];
  check_config(cfg);
  if ((cfg.method == SparsePrefillMethod::VerticalSlash || cfg.method == SparsePrefillMethod::MMInference) &&
      lines_.device_planned(b, head_patterns(layer, cfg, H), q, act, kv, meta, scale, out, stream, counts_)) {
    last_plan_ = lines_.device_plan_view();
    mark("sparse_kernel");
    return true;
  }
  if (cfg.method != SparsePrefillMethod::Grid && cfg.method != SparsePrefillMethod::MMInference &&
      cfg.method != SparsePrefillMethod::XAttention)
    return false;
  const std::vector<HeadPattern> pats = head_patterns(layer, cfg, H);
  if (xattn_.device_planned(b, pats, q, act, kv, meta, scale, out, stream, counts_)) {
    last_plan_ = xattn_.view();
    return true;
  }
  if (!device_grid_heads(pats)) return false;
  const std::vector<GridLayout> layouts = grid_layouts(layer, b, 0, pats, q, act, kv, meta, scale, stream);
  for (const GridLayout& l : layouts)
    if (l.stride > cuda::kGridPlanMaxStride) return false;  // a known stride beyond the device plan's range
  // The counts stay on the device until the step ends (finish_step: no sync per layer).
  BlockCounts* target = b.sparse_block_counts.empty() ? nullptr : b.sparse_block_counts[0];
  const int t0 = b.cu_seqlens_q[0], q_len = q_len_of(b, 0), N = b.context_lens[0];
  unsigned long long* acc = counts_.counter(target, stream);
  const int buf = layer & 1;
  cuda::CudaGridPlan& plan = device_plans_[buf];
  if (pending_[buf]) {  // built (or being built) on the side stream
    VLM_CUDA_CHECK(cudaStreamWaitEvent(stream, ready_[buf], 0));
    pending_[buf] = false;
  }
  // The plan built ahead for this layer (plan_ahead at the previous layer), else built here.
  const bool built = ahead_.layer == layer && ahead_.t0 == t0 && ahead_.q_len == q_len && ahead_.num_keys == N;
  ahead_ = Ahead{};
  if (!built) plan.build(layouts, pats[0].grid, t0, q_len, N, stream, acc, layer);
  if (acc) counts_.add_causal(plan.causal_blocks());
  mark("sparse_plan");
  last_plan_ = plan.view();
  const bool ahead = plan_ahead_wanted();
  if (ahead) {
    if (!side_) {
      VLM_CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
      for (cudaEvent_t* e : {&go_, &ready_[0], &ready_[1]})
        VLM_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    }
    VLM_CUDA_CHECK(cudaEventRecord(go_, stream));
  }
  cuda::paged_block_sparse_attention(q, act, H, kv, meta, plan.view(), scale, out, stream);
  if (ahead) plan_ahead(layer, b, H, acc);
  mark("sparse_kernel");
  return true;
}

void CudaSparsePrefill::attention(int layer, const ForwardBatch& b, const void* q, DType act, int H,
                                  const PagedKVLayer& kv, const cuda::CudaAttentionBatch& meta, float scale, void* out,
                                  cudaStream_t stream, StepProfiler* prof) {
  prof_ = prof, stream_ = stream;
  if (prof) grid_.marker = xattn_.marker = [this](const char* name) { mark(name); };
  else grid_.marker = xattn_.marker = nullptr;
  if (device_planned(layer, b, q, act, H, kv, meta, scale, out, stream)) return;
  const int S = b.num_seqs();
  std::vector<BlockSparsePlan> plans(S);
  std::vector<const BlockSparsePlan*> ptrs(S, nullptr);
  for (int s = 0; s < S; ++s) {
    const int q_len = q_len_of(b, s);
    if (q_len == 0) continue;
    if (sparse_here(b, s)) {
      plans[s] = plan_sequence(layer, b, s, q, act, H, kv, meta, scale, stream);
      if (s < static_cast<int>(b.sparse_block_counts.size()) && b.sparse_block_counts[s])
        CudaSparseCounts::add(b.sparse_block_counts[s], plan_block_counts(plans[s]));  // ranks: under a lock
    } else {
      plans[s] = dense_plan(q_len, b.context_lens[s], H);
    }
    ptrs[s] = &plans[s];
  }
  plan_.upload(ptrs, b.cu_seqlens_q.data(), H, stream);
  last_plan_ = plan_.view();
  mark("sparse_plan");
  cuda::paged_block_sparse_attention(q, act, H, kv, meta, plan_, scale, out, stream);
  mark("sparse_kernel");
}

}  // namespace vlm

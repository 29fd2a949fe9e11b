// CudaBlockSparsePlan::upload: the batch's BlockSparsePlans flattened into one int32 buffer.
// Layout: items [num_items, 4], then the SparseHeadDescs (8-byte aligned), then per head its
// q_order, k_order, block_ptr, blocks, col_ptr, cols.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kernels/core/check.h"
#include "kernels/cuda/sparse_prefill/cuda_block_sparse.h"

namespace vlm::cuda {
namespace {
int g_split = 0;  // set_block_sparse_split
}  // namespace

void set_block_sparse_split(int piece_tiles) { g_split = piece_tiles; }

bool block_sparse_split_fixed() { return g_split != 0; }

int block_sparse_policy_ctas() {
  static const int ctas = [] {
    int dev = 0, sms = 0;
    VLM_CUDA_CHECK(cudaGetDevice(&dev));
    VLM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return 2 * sms;
  }();
  return ctas;
}

SplitPolicy block_sparse_split_policy(int64_t blocks, int64_t cols, int num_items) {
  SplitPolicy p;
  if (g_split < 0 || num_items <= 0) return p;
  if (g_split > 0) {
    p.piece = p.threshold = g_split;
    return p;
  }
  return auto_split_policy(blocks, cols, num_items, block_sparse_policy_ctas());
}

SplitBounds block_sparse_split_bounds(const SplitPolicy& p, int64_t blocks, int64_t cols, int num_items) {
  SplitBounds b;
  b.pieces = num_items;
  if (p.piece <= 0) return b;
  // Item i of t_i tiles: pieces <= t_i / piece + 1 if split (t_i > threshold), else 1; the split
  // items number < tiles / (threshold + 1); sum t_i <= blocks + cols / 64 + num_items (the ceil).
  const int64_t tiles = blocks + (cols + 63) / 64 + num_items;
  b.pieces = num_items + tiles / p.piece + 1;
  b.slots = tiles / p.piece + tiles / (p.threshold + 1) + 1;
  return b;
}

void CudaBlockSparsePlan::upload(std::span<const BlockSparsePlan* const> plans, const int32_t* cu_host, int H,
                                 cudaStream_t stream) {
  const int S = static_cast<int>(plans.size());
  num_heads_ = H;
  counts_ = {};
  struct Item {
    int32_t seq, head, qblock, tiles;
    double cost;
  };
  std::vector<Item> items;
  int64_t words = 0;  // the arrays
  int64_t total_blocks = 0, total_cols = 0;
  for (int s = 0; s < S; ++s) {
    const BlockSparsePlan* p = plans[s];
    if (!p) continue;
    VLM_CHECK(p->block_m == 64 && p->block_n == 64, "CUDA block-sparse attention needs 64x64 blocks, plan has {}x{}",
              p->block_m, p->block_n);
    VLM_CHECK(static_cast<int>(p->heads.size()) == H && p->q_len == cu_host[s + 1] - cu_host[s],
              "sequence {}: plan for {} heads q_len {}, batch has {} heads q_len {}", s, p->heads.size(), p->q_len, H,
              cu_host[s + 1] - cu_host[s]);
    counts_ += plan_block_counts(*p);
    for (int h = 0; h < H; ++h) {
      const HeadPlan& hp = p->heads[h];
      words += static_cast<int64_t>(hp.q_order.size() + hp.k_order.size() + hp.block_ptr.size() + hp.blocks.size() +
                                    hp.col_ptr.size() + hp.cols.size());
      for (int m = 0; m < p->num_qblocks(); ++m) {
        const int nb = hp.block_ptr[m + 1] - hp.block_ptr[m], nc = hp.col_ptr[m + 1] - hp.col_ptr[m];
        items.push_back({s, h, m, nb + (nc + 63) / 64, nb + nc / 64.0 + 0.25});
        total_blocks += nb;
        total_cols += nc;
      }
    }
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.cost > b.cost; });
  static_assert(sizeof(SparseHeadDesc) % 8 == 0);
  // Split long items (SplitPolicy): piece and slot offsets after the items, when some item splits.
  const int n = static_cast<int>(items.size());
  const SplitPolicy policy = block_sparse_split_policy(total_blocks, total_cols, n);
  std::vector<int32_t> piece_off(n + 1, 0), slot_off(n + 1, 0);
  for (int i = 0; i < n; ++i) {
    const int np = policy.pieces(items[i].tiles);
    piece_off[i + 1] = piece_off[i] + np;
    slot_off[i + 1] = slot_off[i] + (np > 1 ? np : 0);
  }
  const bool split = slot_off[n] > 0;
  const int64_t split_words = split ? 2 * (static_cast<int64_t>(n) + 1) : 0;
  const int64_t item_words = (4 * static_cast<int64_t>(n) + split_words + 1) & ~int64_t(1);  // keep descs 8-aligned
  const int64_t desc_words = static_cast<int64_t>(S) * H * (sizeof(SparseHeadDesc) / 4);
  const int64_t base = item_words + desc_words;
  VLM_CHECK(base + words < (int64_t(1) << 31), "block-sparse plan of {} words too large", base + words);
  // The staging buffer is pinned (one DMA copy) and reused: wait for the previous upload first.
  if (pending_) VLM_CUDA_CHECK(cudaStreamSynchronize(pending_stream_));
  const size_t total = static_cast<size_t>(base + words);
  host_.reserve(total * sizeof(int32_t));
  int32_t* const hw = host_.as<int32_t>();
  std::fill(hw, hw + base, 0);
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    int32_t* w = hw + 4 * i;
    w[0] = it.seq, w[1] = it.head, w[2] = it.qblock, w[3] = it.seq * H + it.head;
  }
  if (split) {
    std::copy(piece_off.begin(), piece_off.end(), hw + 4 * static_cast<int64_t>(n));
    std::copy(slot_off.begin(), slot_off.end(), hw + 4 * static_cast<int64_t>(n) + n + 1);
  }
  int64_t at = base;
  auto put = [&](const std::vector<int32_t>& v) {
    if (v.empty()) return int64_t(-1);
    std::copy(v.begin(), v.end(), hw + at);
    at += static_cast<int64_t>(v.size());
    return at - static_cast<int64_t>(v.size());
  };
  for (int s = 0; s < S; ++s) {
    const BlockSparsePlan* p = plans[s];
    for (int h = 0; h < H; ++h) {
      SparseHeadDesc d{};
      if (p) {
        const HeadPlan& hp = p->heads[h];
        d.q_order = put(hp.q_order);
        d.k_order = put(hp.k_order);
        d.block_ptr = put(hp.block_ptr);
        d.blocks = std::max<int64_t>(put(hp.blocks), 0);
        d.col_ptr = put(hp.col_ptr);
        d.cols = std::max<int64_t>(put(hp.cols), 0);
        d.t0 = cu_host[s];
        d.q_len = p->q_len;
        d.num_keys = p->num_keys;
        d.flags = std::all_of(hp.blocks.begin(), hp.blocks.end(), [](int32_t k0) { return k0 % 64 == 0; })
                      ? kHeadAlignedBlocks
                      : 0;
      }
      std::memcpy(hw + item_words + (static_cast<int64_t>(s) * H + h) * (sizeof(SparseHeadDesc) / 4), &d,
                  sizeof d);
    }
  }
  dev_.reserve(total * sizeof(int32_t));
  if (total > 0) {
    VLM_CUDA_CHECK(cudaMemcpyAsync(dev_.get(), hw, total * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
    pending_ = true;
    pending_stream_ = stream;
  }
  const int32_t* d = dev_.as<int32_t>();
  view_.data = d;
  view_.items = d;
  view_.descs = reinterpret_cast<const SparseHeadDesc*>(d + item_words);
  view_.num_items = n;
  view_.piece_off = split ? d + 4 * static_cast<int64_t>(n) : nullptr;
  view_.slot_off = split ? d + 4 * static_cast<int64_t>(n) + n + 1 : nullptr;
  view_.max_pieces = piece_off[n];
  view_.partial = nullptr;
  if (split) {
    // At least the automatic policy's bound (no reallocation, a device-wide sync, per call).
    partial_.reserve(static_cast<size_t>(std::max<int64_t>(slot_off[n], kMaxSplitSlots)) * kSplitSlotFloats *
                     sizeof(float));
    view_.partial = partial_.as<float>();
  }
}

void paged_block_sparse_attention(const void* q, DType act, int num_heads, const PagedKVLayer& kv,
                                  const CudaAttentionBatch& batch, const SparsePlanView& view, float scale, void* out,
                                  cudaStream_t stream) {
  VLM_CHECK(num_heads % kv.num_kv_heads == 0 && (kv.head_dim == 64 || kv.head_dim == 128) &&
                (kv.block_size & (kv.block_size - 1)) == 0,
            "block-sparse attention: H {} Hkv {} D {} block size {}", num_heads, kv.num_kv_heads, kv.head_dim,
            kv.block_size);
  VLM_CHECK(kv.dtype == DType::BF16 || kv.dtype == DType::F16 || kv.dtype == DType::F8_E4M3,
            "block-sparse attention on the GPU needs a bf16/f16/fp8 cache, not {}", dtype_name(kv.dtype));
  if (view.num_items == 0) return;
  launch_block_sparse_attention(q, act, num_heads, kv, batch, view, scale, out, stream);
}

void paged_block_sparse_attention(const void* q, DType act, int num_heads, const PagedKVLayer& kv,
                                  const CudaAttentionBatch& batch, const CudaBlockSparsePlan& plan, float scale,
                                  void* out, cudaStream_t stream) {
  VLM_CHECK(plan.num_heads() == num_heads, "plan for {} heads, call with {}", plan.num_heads(), num_heads);
  paged_block_sparse_attention(q, act, num_heads, kv, batch, plan.view(), scale, out, stream);
}

}  // namespace vlm::cuda

// Portable tile kernels of paged_attention: plain loops (the compiler vectorizes them for the
// baseline instruction set). Used on CPUs without AVX-512 and as a second check in the tests.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention/paged_attention_internal.h"
#include "kernels/core/cpu_features.h"

namespace vlm::attn {
namespace {

constexpr int KT = kKeyTile;

void load_kv_generic(const PagedKVLayer& kv, const int32_t* block_row, int kvh, int k0, int n,
                     int Dp, float* kt /*[Dp,KT]*/, float* vbuf /*[KT,Dp]*/,
                     const float** vrows /*[KT]*/) {
  const int D = kv.head_dim;
  const int B = kv.block_size;
  const size_t esize = dtype_size(kv.dtype);
  thread_local std::vector<float> krow;
  krow.resize(D);
  for (int j = 0; j < n; ++j) {
    const int pos = k0 + j;
    const int64_t elem = block_row[pos / B] * kv.block_stride() + kvh * kv.head_stride() +
                         static_cast<int64_t>(pos % B) * D;
    convert_to_f32(static_cast<const uint8_t*>(kv.k) + elem * esize, kv.dtype, krow.data(), D);
    for (int d = 0; d < D; ++d) kt[d * KT + j] = krow[d];
    convert_to_f32(static_cast<const uint8_t*>(kv.v) + elem * esize, kv.dtype, vbuf + j * Dp, D);
    vrows[j] = vbuf + j * Dp;
  }
  for (int d = D; d < Dp; ++d) std::fill(kt + d * KT, kt + d * KT + KT, 0.0f);
}

void scores_generic(const float* q /*[M,Dp]*/, int M, int Dp, const float* kt /*[Dp,KT]*/,
                    int n, float* s /*[M,KT]*/, PrefetchLines* /*pf: the caller issues them*/) {
  for (int m = 0; m < M; ++m) {
    float row[KT] = {};
    const float* qm = q + m * Dp;
    for (int d = 0; d < Dp; ++d) {
      const float qd = qm[d];
      const float* kd = kt + d * KT;
      for (int j = 0; j < KT; ++j) row[j] += qd * kd[j];
    }
    std::copy(row, row + n, s + m * KT);
  }
}

void softmax_generic(float* s /*[M,KT]*/, const int* nvalid /*[M]*/, int M, int Dp,
                     float* m_run /*[M]*/, float* l_run /*[M,kSumLanes]*/,
                     float* acc /*[M,Dp]*/) {
  for (int m = 0; m < M; ++m) {
    float* row = s + m * KT;
    const int nv = nvalid[m];
    if (nv <= 0) {
      std::fill(row, row + KT, 0.0f);
      continue;
    }
    float mx = row[0];
    for (int j = 1; j < nv; ++j) mx = std::max(mx, row[j]);
    const float m_old = m_run[m];
    const float m_new = mx > m_old + kRescaleThreshold ? mx : m_old;
    const float alpha = m_old == -INFINITY ? 0.0f : std::exp2(m_old - m_new);
    float sum = 0.0f;
    for (int j = 0; j < nv; ++j) {
      row[j] = std::exp2(row[j] - m_new);
      sum += row[j];
    }
    std::fill(row + nv, row + KT, 0.0f);
    m_run[m] = m_new;
    float* l = l_run + m * kSumLanes;  // the sum lives in lane 0
    l[0] = l[0] * alpha + sum;
    if (alpha != 1.0f)
      for (int d = 0; d < Dp; ++d) acc[m * Dp + d] *= alpha;
  }
}

void pv_generic(const float* p /*[M,KT]*/, const int* nvalid /*[M]*/, int M, int Dp,
                const float* const* vrows /*[KT]*/, float* acc /*[M,Dp]*/, PrefetchLines* /*pf*/) {
  for (int m = 0; m < M; ++m) {
    float* a = acc + m * Dp;
    for (int j = 0; j < nvalid[m]; ++j) {
      const float pj = p[m * KT + j];
      const float* vj = vrows[j];
      for (int d = 0; d < Dp; ++d) a[d] += pj * vj[d];
    }
  }
}

}  // namespace

const TileOps& tile_ops_generic() {
  static const TileOps ops{"generic", nullptr, load_kv_generic, scores_generic, softmax_generic,
                           pv_generic};
  return ops;
}

const TileOps& tile_ops_best() {
  const TileOps* a = use_avx512() ? tile_ops_avx512() : nullptr;
  return a ? *a : tile_ops_generic();
}

bool bf16_tiles_fit(const PagedKVLayer& kv) { return kv.dtype == DType::BF16 && kv.head_dim % 32 == 0; }

const TileOps& tile_ops_for(const PagedKVLayer& kv) {
  const TileOps* b = bf16_attention() && bf16_tiles_fit(kv) ? tile_ops_avx512_bf16() : nullptr;
  return b ? *b : tile_ops_best();
}

}  // namespace vlm::attn

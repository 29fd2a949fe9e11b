#include "kernels/attention/paged_kv.h"

#include "kernels/core/check.h"
#include "kernels/core/thread_pool.h"

namespace vlm {

void write_kv(const PagedKVLayer& layer, const float* k /*[T,Hkv,D]*/,
              const float* v /*[T,Hkv,D]*/, const int32_t* slot_mapping /*[T]*/, int64_t T) {
  if (T <= 0) return;
  VLM_CHECK(layer.dtype == DType::F32 || layer.dtype == DType::BF16 || layer.dtype == DType::F16,
            "KV cache dtype {}", dtype_name(layer.dtype));
  VLM_CHECK(layer.k && layer.v && k && v && slot_mapping, "null pointer");
  VLM_CHECK(layer.block_size > 0 && layer.num_kv_heads > 0 && layer.head_dim > 0,
            "B={} Hkv={} D={}", layer.block_size, layer.num_kv_heads, layer.head_dim);
  const int64_t num_slots = layer.num_blocks * layer.block_size;
  // Validate every slot first so that a bad batch writes nothing.
  for (int64_t t = 0; t < T; ++t) {
    const int32_t s = slot_mapping[t];
    VLM_CHECK(s >= -1 && s < num_slots, "slot_mapping[{}] = {} outside [-1, {})", t, s, num_slots);
  }

  const int Hkv = layer.num_kv_heads;
  const int D = layer.head_dim;
  const int B = layer.block_size;
  const size_t esize = dtype_size(layer.dtype);
  auto* kbase = static_cast<uint8_t*>(layer.k);
  auto* vbase = static_cast<uint8_t*>(layer.v);

  global_thread_pool().parallel_for(
      T,
      [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          const int32_t s = slot_mapping[t];
          if (s < 0) continue;
          const int64_t block = s / B;
          const int64_t off = s % B;
          for (int h = 0; h < Hkv; ++h) {
            // element offset of k[block, h, off, 0]
            const int64_t dst = block * layer.block_stride() + h * layer.head_stride() + off * D;
            const int64_t src = (t * Hkv + h) * static_cast<int64_t>(D);
            convert_from_f32(k + src, layer.dtype, kbase + dst * esize, D);
            convert_from_f32(v + src, layer.dtype, vbase + dst * esize, D);
          }
        }
      },
      /*grain=*/256);
}

}  // namespace vlm

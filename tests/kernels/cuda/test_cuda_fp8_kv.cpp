// The FP8 KV cache on the GPU (--kv-cache-dtype fp8; cuda_attention.h): paged_kv_write and its
// naive reference store exactly kernels/core/fp8.h's e4m3(x * (1 / scale[h])) bytes under per-head
// scales; the tiled prefill (mma.sync) and split-K decode kernels (plain and merged reduce) and the
// naive kernel read them. Each is compared with the CPU reference over the dequantized cache
// (fp8 * scale: the exact attention over what is stored; tight: the tiled kernels' own bf16
// rounding of q and P, as for a bf16 cache), the tiled ones with the naive one, and all with the
// CPU reference over the unquantized (bf16) K/V: FP8's own error plus the kernel's tolerance, printed.
// The decode kernel runs in its four FP8 forms (decode_attention.cu: v2 converts in registers for
// f16 mma, v1 in shared memory for bf16 mma, v3 is v2 with a deeper pipeline, v4 is v3 with V
// converted by integer ops), chosen through set_fp8_kv_decode_form.
// Skips with a message when no GPU is visible.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/paged_attention.h"
#include "kernels/core/fp8.h"
#include "kernels/cuda/attention/cuda_attention.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm {
namespace {

using testing::normalized_error;
using testing::to_device;

struct Seq {
  int q_len;  // query rows this step (the tail of the sequence)
  int ctx;    // tokens in the cache, these rows included
};

struct Case {
  const char* name;
  std::vector<Seq> seqs;
  int H, Hkv, D, B;
  DType act;
  bool decode;
};

// Per-head magnitudes: keys and values of head h are U(-1, 1) * mag(h), mag from 0.05 to 40 (a
// spread a real model's heads show); scales: 1.0 (vLLM's default) on even heads, mag / 64 on odd
// ones (a calibrated scale), so both policies are covered.
float magnitude(int h, bool value) { return (value ? 0.5f : 1.0f) * std::pow(10.f, float(h % 4) * 0.9f - 1.3f); }
float head_scale(int h, bool value) { return h % 2 == 0 ? 1.0f : magnitude(h, value) / 64.f; }

void run_case(const Case& c, uint32_t seed) {
  SCOPED_TRACE(c.name);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  const int n = int(c.seqs.size()), D = c.D, Hkv = c.Hkv;
  int max_blocks = 1, total_blocks = 3, T = 0, max_q = 0, max_ctx = 0;
  for (const Seq& s : c.seqs) {
    max_blocks = std::max(max_blocks, (s.ctx + c.B - 1) / c.B + 1);
    total_blocks += (s.ctx + c.B - 1) / c.B;
    T += s.q_len;
    max_q = std::max(max_q, s.q_len);
    max_ctx = std::max(max_ctx, s.ctx);
  }
  std::vector<int32_t> pool(total_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  std::vector<int32_t> cu{0}, ctx, tables(size_t(n) * max_blocks, -1), slots;
  for (int s = 0, next = 0; s < n; ++s) {
    cu.push_back(cu.back() + c.seqs[s].q_len);
    ctx.push_back(c.seqs[s].ctx);
    for (int j = 0; j < (c.seqs[s].ctx + c.B - 1) / c.B; ++j) tables[size_t(s) * max_blocks + j] = pool[next++];
    for (int j = 0; j < c.seqs[s].ctx; ++j) slots.push_back(tables[size_t(s) * max_blocks + j / c.B] * c.B + j % c.B);
  }
  slots.push_back(-1);  // a skipped token
  const int W = int(slots.size());

  std::vector<float> k(size_t(W) * Hkv * D), v(k.size()), q(size_t(T) * c.H * D);
  for (size_t i = 0; i < k.size(); ++i) {
    const int h = int(i / D % Hkv);
    k[i] = uni(rng) * magnitude(h, false);
    v[i] = uni(rng) * magnitude(h, true);
  }
  // Queries scaled so that every head's logits q.k / sqrt(D) have a spread of a few units.
  for (size_t i = 0; i < q.size(); ++i) q[i] = 6.f * uni(rng) / magnitude(int(i / D % c.H) / (c.H / Hkv), false);
  const std::vector<uint8_t> k_act = testing::encode(k, c.act), v_act = testing::encode(v, c.act),
                             q_act = testing::encode(q, c.act);
  k = testing::decode(k_act, c.act);
  v = testing::decode(v_act, c.act);
  q = testing::decode(q_act, c.act);
  std::vector<float> ks(Hkv), vs(Hkv);
  for (int h = 0; h < Hkv; ++h) ks[h] = head_scale(h, false), vs[h] = head_scale(h, true);

  // The expected cache bytes (0xff, E4M3 NaN, where nothing is written) and its dequantized f32
  // copy; and the unquantized cache in bf16 for FP8's own error.
  PagedKVLayer host;
  host.num_blocks = total_blocks;
  host.block_size = c.B;
  host.num_kv_heads = Hkv;
  host.head_dim = D;
  const size_t elems = size_t(total_blocks) * host.block_stride();
  std::vector<uint8_t> hk(elems, 0xff), hv(elems, 0xff);
  std::vector<float> dk(elems, NAN), dv(elems, NAN);
  for (int w = 0; w < W; ++w) {
    if (slots[w] < 0) continue;
    for (int h = 0; h < Hkv; ++h)
      for (int d = 0; d < D; ++d) {
        const size_t dst = size_t(slots[w] / c.B) * host.block_stride() + size_t(h) * host.head_stride() +
                           size_t(slots[w] % c.B) * D + d;
        const size_t src = (size_t(w) * Hkv + h) * D + d;
        hk[dst] = f32_to_fp8_e4m3(k[src] * (1.f / ks[h]));
        hv[dst] = f32_to_fp8_e4m3(v[src] * (1.f / vs[h]));
        dk[dst] = fp8_e4m3_to_f32(hk[dst]) * ks[h];
        dv[dst] = fp8_e4m3_to_f32(hv[dst]) * vs[h];
      }
  }
  AttentionBatch cpu;
  cpu.num_seqs = n;
  cpu.cu_seqlens_q = cu.data();
  cpu.context_lens = ctx.data();
  cpu.block_tables = tables.data();
  cpu.max_blocks_per_seq = max_blocks;
  const float scale = 1.f / std::sqrt(float(D));
  std::vector<float> ref_fp8(q.size()), ref_bf16(q.size());
  PagedKVLayer deq = host;
  deq.dtype = DType::F32;
  deq.k = dk.data();
  deq.v = dv.data();
  paged_attention_ref(q.data(), c.H, deq, cpu, scale, ref_fp8.data());
  {
    std::vector<uint8_t> bk(elems * 2, 0), bv(elems * 2, 0);
    PagedKVLayer b16 = host;
    b16.dtype = DType::BF16;
    b16.k = bk.data();
    b16.v = bv.data();
    write_kv(b16, k.data(), v.data(), slots.data(), W);
    paged_attention_ref(q.data(), c.H, b16, cpu, scale, ref_bf16.data());
  }

  // Device cache written by paged_kv_write, and by the naive writer into a second one.
  cuda::DeviceBuffer gk(elems), gv(elems), nk(elems), nv(elems);
  for (auto* b : {&gk, &gv, &nk, &nv}) ASSERT_EQ(cudaMemset(b->get(), 0xff, elems), cudaSuccess);
  const cuda::DeviceBuffer dks = to_device(ks), dvs = to_device(vs), dkin = to_device(k_act), dvin = to_device(v_act),
                           dslots = to_device(slots), dq = to_device(q_act), dcu = to_device(cu),
                           dctx = to_device(ctx), dtables = to_device(tables);
  PagedKVLayer dev = host;
  dev.dtype = DType::F8_E4M3;
  dev.k = gk.get();
  dev.v = gv.get();
  dev.k_scale = dks.as<float>();
  dev.v_scale = dvs.as<float>();
  cuda::paged_kv_write(dev, dkin.get(), dvin.get(), c.act, dslots.as<int32_t>(), W, nullptr);
  PagedKVLayer naive_dev = dev;
  naive_dev.k = nk.get();
  naive_dev.v = nv.get();
  cuda::paged_kv_write_naive(naive_dev, dkin.get(), dvin.get(), c.act, dslots.as<int32_t>(), W, nullptr);
  EXPECT_TRUE(testing::to_host<uint8_t>(gk, elems) == hk) << "paged_kv_write K bytes differ from fp8.h's";
  EXPECT_TRUE(testing::to_host<uint8_t>(gv, elems) == hv) << "paged_kv_write V bytes differ from fp8.h's";
  EXPECT_TRUE(testing::to_host<uint8_t>(nk, elems) == hk) << "paged_kv_write_naive K bytes differ from fp8.h's";
  EXPECT_TRUE(testing::to_host<uint8_t>(nv, elems) == hv) << "paged_kv_write_naive V bytes differ from fp8.h's";

  cuda::CudaAttentionBatch batch;
  batch.num_seqs = n;
  batch.cu_seqlens_q = dcu.as<int32_t>();
  batch.context_lens = dctx.as<int32_t>();
  batch.block_tables = dtables.as<int32_t>();
  batch.max_blocks_per_seq = max_blocks;
  batch.max_q_len = max_q;
  batch.max_context_len = max_ctx;
  const size_t out_bytes = q_act.size();
  auto read = [&](const cuda::DeviceBuffer& b) { return testing::decode(testing::to_host<uint8_t>(b, out_bytes), c.act); };
  // The tiled kernels round q and P to bf16 (as over a bf16 cache; decode v2: f16); bf16 activations
  // round the output.
  const double tiled_tol = 2e-2 + (c.act == DType::F32 ? 0.0 : 8e-3);
  const double naive_tol = c.act == DType::F32 ? 2e-5 : 8e-3;
  std::vector<std::pair<std::string, std::vector<float>>> outs;
  if (c.decode) {
    // The FP8 forms: v2 (registers, the default), v1 (shared memory), v3 (v2 with six stages and the
    // block-table entries read a tile ahead), v4 (v3 with V converted by integer ops).
    for (int form : {2, 1, 3, 4}) {
      const std::string form_name = form == 1 ? "v1" : form == 2 ? "v2" : form == 3 ? "v3" : "v4";
      const int before = cuda::set_fp8_kv_decode_form(form);
      cuda::DeviceBuffer ws(cuda::paged_decode_workspace_bytes(n, c.H, Hkv, D, max_ctx)), out(out_bytes),
          merged(out_bytes), counters(size_t(n) * Hkv * 4);
      ASSERT_EQ(cudaMemset(counters.get(), 0, counters.bytes()), cudaSuccess);
      cuda::paged_decode_attention(dq.get(), c.act, c.H, dev, batch, scale, out.get(), ws.get(), nullptr);
      outs.emplace_back("decode " + form_name, read(out));
      // The merged reduce (the CUDA graphs' path), twice: the same bytes, the counters back to 0.
      cuda::paged_decode_attention(dq.get(), c.act, c.H, dev, batch, scale, merged.get(), ws.get(), nullptr,
                                   counters.as<int32_t>());
      const std::vector<uint8_t> first = testing::to_host<uint8_t>(merged, out_bytes);
      cuda::paged_decode_attention(dq.get(), c.act, c.H, dev, batch, scale, merged.get(), ws.get(), nullptr,
                                   counters.as<int32_t>());
      EXPECT_TRUE(testing::to_host<uint8_t>(merged, out_bytes) == first) << form_name << " merged reduce: two calls differ";
      const std::vector<int32_t> left = testing::to_host<int32_t>(counters, size_t(n) * Hkv);
      EXPECT_EQ(std::count(left.begin(), left.end(), 0), int64_t(left.size())) << form_name << " counters not back to 0";
      outs.emplace_back("decode " + form_name + " (merged reduce)", read(merged));
      cuda::set_fp8_kv_decode_form(before);
    }
  } else {
    for (auto kern : {cuda::PrefillKernel::kAuto, cuda::PrefillKernel::kMmaSync, cuda::PrefillKernel::kWgmmaPp}) {
      cuda::DeviceBuffer out(out_bytes);
      cuda::paged_prefill_attention(dq.get(), c.act, c.H, dev, batch, scale, out.get(), nullptr, kern);
      outs.emplace_back("prefill kernel " + std::to_string(int(kern)), read(out));
    }
  }
  std::vector<float> naive;
  if (max_ctx <= 12000) {
    cuda::DeviceBuffer out(out_bytes);
    cuda::paged_attention_naive(dq.get(), c.act, c.H, dev, batch, scale, out.get(), nullptr);
    naive = read(out);
    EXPECT_LE(normalized_error(naive, ref_fp8), naive_tol) << "naive vs CPU reference over the dequantized cache";
  }
  for (const auto& [what, got] : outs) {
    const double e_fp8 = normalized_error(got, ref_fp8), e_bf16 = normalized_error(got, ref_bf16);
    EXPECT_LE(e_fp8, tiled_tol) << what << " vs CPU reference over the dequantized cache";
    if (!naive.empty()) {
      EXPECT_LE(normalized_error(got, naive), tiled_tol) << what << " vs the naive kernel";
    }
    // Against bf16 K/V (loose): FP8's own error (the CPU references' difference: 3 mantissa bits,
    // and subnormals for the small heads under scale 1.0) plus no more than the kernel's tolerance.
    EXPECT_LE(e_bf16, normalized_error(ref_fp8, ref_bf16) + tiled_tol) << what << " vs CPU reference over bf16 K/V";
    EXPECT_LE(normalized_error(ref_fp8, ref_bf16), 0.25) << "the FP8 rounding itself (the test's data)";
    std::printf("[ fp8 kv ] %s, %s: normalized error %.2e vs dequantized-cache reference, %.2e vs bf16 K/V "
                "(reference itself: %.2e)\n",
                c.name, what.c_str(), e_fp8, e_bf16, normalized_error(ref_fp8, ref_bf16));
  }
}

constexpr DType F32 = DType::F32, BF16 = DType::BF16, F16 = DType::F16;

TEST(CudaFp8Kv, DecodeReadsFp8Cache) {
  VLM_REQUIRE_GPU();
  std::vector<Seq> many;
  for (int i = 0; i < 40; ++i) many.push_back({1, 1 + 53 * i});
  std::vector<Seq> many48;
  for (int i = 0; i < 48; ++i) many48.push_back({1, 2500 + 37 * i});
  const std::vector<Case> cases = {
      {"decode G7 D128 B16 bf16", {{1, 1}, {1, 100}, {1, 1000}, {1, 5000}}, 28, 4, 128, 16, BF16, true},
      {"decode one long G7 D128 B32", {{1, 20000}}, 28, 4, 128, 32, BF16, true},
      {"decode 40 seqs G4 D64 B16", many, 8, 2, 64, 16, BF16, true},
      // Many pairs: 2 splits a group, partitions of ~20 tiles (the register forms' 4 and 6 stages wrap).
      {"decode 48 seqs G7 D128 B16", many48, 28, 4, 128, 16, BF16, true},
      {"decode G1 D128 f16 act", {{1, 3000}, {1, 65}}, 4, 4, 128, 32, F16, true},
      {"decode f32 act G8", {{1, 700}, {1, 2}}, 16, 2, 128, 16, F32, true},
  };
  uint32_t seed = 300;
  for (const Case& c : cases) run_case(c, seed++);
}

TEST(CudaFp8Kv, PrefillOverCachedContextReadsFp8Cache) {
  VLM_REQUIRE_GPU();
  const std::vector<Case> cases = {
      {"varlen G4 D128 B16", {{37, 37}, {64, 64}, {130, 130}, {1, 1}}, 8, 2, 128, 16, BF16, false},
      {"chunks over context G4 D128 B32", {{50, 300}, {1, 77}, {64, 200}, {129, 1000}}, 8, 2, 128, 32, BF16, false},
      {"chunks G7 D64 B16 f16 act", {{70, 170}, {3, 40}}, 7, 1, 64, 16, F16, false},
      {"long chunks G7 D128 B16 f32 act", {{300, 1500}, {128, 640}, {1, 900}}, 14, 2, 128, 16, F32, false},
  };
  uint32_t seed = 400;
  for (const Case& c : cases) run_case(c, seed++);
}

}  // namespace
}  // namespace vlm

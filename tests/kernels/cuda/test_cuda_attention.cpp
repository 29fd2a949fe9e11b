// CUDA attention kernels (kernels/cuda/attention) against the CPU references: paged_kv_write
// against write_kv (bytes equal), paged_prefill_attention / paged_decode_attention and their naive
// CUDA reference against paged_attention_ref, over a table of batches (varlen, GQA 1/4/7, D 64/128,
// B 16/32, chunks over cached context, f32/bf16/f16 caches, f32/bf16 activations; decode through
// every plan, cuda::DecodeKernel v1, v2 and v3, each also against the naive kernel).
// Built only with the CUDA backend (test_cuda); skips with a message when no GPU is visible.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/paged_attention.h"
#include "kernels/cuda/attention/cuda_attention.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm {
namespace {

using testing::normalized_error;

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

struct Seq {
  int q_len;  // query rows this step (the tail of the sequence)
  int ctx;    // tokens in the cache, these rows included
};

struct Case {
  const char* name;
  std::vector<Seq> seqs;
  int H, Hkv, D, B;
  DType cache, act;
  bool decode = false;  // every q_len is 1: run paged_decode_attention
};

// Normalized error max|a - b| / max|ref| below which a cache dtype passes.
double tolerance(DType cache) { return cache == DType::F32 ? 2e-5 : cache == DType::F16 ? 4e-3 : 2e-2; }

struct DevMem {
  void* p = nullptr;
  explicit DevMem(size_t n) { EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(n, 16)), cudaSuccess); }
  ~DevMem() { cudaFree(p); }
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
  template <class T> T* as() const { return static_cast<T*>(p); }
};

template <class T>
void upload(DevMem& d, const std::vector<T>& h) {
  ASSERT_EQ(cudaMemcpy(d.p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
}

// Activation bytes of f32 values in dtype act, and the f32 values they hold after rounding.
std::vector<uint8_t> to_act(std::vector<float>& x, DType act) {
  std::vector<uint8_t> bytes(x.size() * dtype_size(act));
  convert_from_f32(x.data(), act, bytes.data(), static_cast<int64_t>(x.size()));
  convert_to_f32(bytes.data(), act, x.data(), static_cast<int64_t>(x.size()));
  return bytes;
}

void run_case(const Case& c, uint32_t seed, cuda::PrefillKernel kernel = cuda::PrefillKernel::kAuto,
              cuda::DecodeKernel decode_kernel = cuda::DecodeKernel::kAuto) {
  static const char* const kernel_names[] = {"auto", "mma.sync", "wgmma", "wgmma warp-specialized", "wgmma pingpong"};
  static const char* const decode_names[] = {"auto", "v1", "v2", "v3 (clusters)"};
  SCOPED_TRACE(std::string(c.name) + " (" +
               (c.decode ? std::string(decode_names[static_cast<int>(decode_kernel)]) + " decode plan"
                         : std::string(kernel_names[static_cast<int>(kernel)]) + " prefill kernel") +
               ")");
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  const int n = int(c.seqs.size());
  // Block tables over a shuffled pool of blocks (a few spare), the cache poisoned with NaN bytes.
  int max_blocks = 1, total_blocks = 3, T = 0, kv_tokens = 0, max_q = 0, max_ctx = 0;
  for (const Seq& s : c.seqs) {
    max_blocks = std::max(max_blocks, (s.ctx + c.B - 1) / c.B + 1);
    total_blocks += (s.ctx + c.B - 1) / c.B;
    T += s.q_len;
    kv_tokens += s.ctx;
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
    for (int j = 0; j < c.seqs[s].ctx; ++j)
      slots.push_back(tables[size_t(s) * max_blocks + j / c.B] * c.B + j % c.B);
  }
  slots.push_back(-1);  // a skipped token
  const int W = int(slots.size());
  const int D = c.D;

  // Every token's K/V (f32, rounded through the activation dtype) and this step's queries.
  std::vector<float> k(size_t(W) * c.Hkv * D), v(k.size()), q(size_t(T) * c.H * D);
  for (float& x : k) x = uni(rng);
  for (float& x : v) x = uni(rng);
  for (float& x : q) x = 2.f * uni(rng);  // peakier rows than U(-1, 1)
  const std::vector<uint8_t> k_act = to_act(k, c.act), v_act = to_act(v, c.act), q_act = to_act(q, c.act);

  PagedKVLayer host_kv;
  host_kv.dtype = c.cache;
  host_kv.num_blocks = total_blocks;
  host_kv.block_size = c.B;
  host_kv.num_kv_heads = c.Hkv;
  host_kv.head_dim = D;
  const size_t cache_bytes = size_t(total_blocks) * host_kv.block_stride() * dtype_size(c.cache);
  std::vector<uint8_t> hk(cache_bytes, 0xff), hv(cache_bytes, 0xff);  // NaN in every dtype
  host_kv.k = hk.data();
  host_kv.v = hv.data();
  write_kv(host_kv, k.data(), v.data(), slots.data(), W);

  DevMem dk(cache_bytes), dv(cache_bytes), dk_in(k_act.size()), dv_in(v_act.size()), dslots(W * 4),
      dq(q_act.size()), dout(q_act.size()), dout_naive(q_act.size()), dcu(cu.size() * 4), dctx(n * 4),
      dtables(tables.size() * 4);
  CUDA_OK(cudaMemset(dk.p, 0xff, cache_bytes));
  CUDA_OK(cudaMemset(dv.p, 0xff, cache_bytes));
  upload(dk_in, k_act);
  upload(dv_in, v_act);
  upload(dslots, slots);
  upload(dq, q_act);
  upload(dcu, cu);
  upload(dctx, ctx);
  upload(dtables, tables);
  PagedKVLayer dev_kv = host_kv;
  dev_kv.k = dk.p;
  dev_kv.v = dv.p;

  // paged_kv_write writes the same bytes as write_kv (one token per launch, then all at once is
  // covered by the naive writer into a second cache).
  cuda::paged_kv_write(dev_kv, dk_in.p, dv_in.p, c.act, dslots.as<int32_t>(), W, nullptr);
  std::vector<uint8_t> got(cache_bytes);
  CUDA_OK(cudaMemcpy(got.data(), dk.p, cache_bytes, cudaMemcpyDeviceToHost));
  EXPECT_TRUE(got == hk) << "paged_kv_write K differs from write_kv";
  CUDA_OK(cudaMemcpy(got.data(), dv.p, cache_bytes, cudaMemcpyDeviceToHost));
  EXPECT_TRUE(got == hv) << "paged_kv_write V differs from write_kv";
  {
    DevMem nk(cache_bytes), nv(cache_bytes);
    CUDA_OK(cudaMemset(nk.p, 0xff, cache_bytes));
    CUDA_OK(cudaMemset(nv.p, 0xff, cache_bytes));
    PagedKVLayer naive_kv = dev_kv;
    naive_kv.k = nk.p;
    naive_kv.v = nv.p;
    cuda::paged_kv_write_naive(naive_kv, dk_in.p, dv_in.p, c.act, dslots.as<int32_t>(), W, nullptr);
    CUDA_OK(cudaMemcpy(got.data(), nk.p, cache_bytes, cudaMemcpyDeviceToHost));
    EXPECT_TRUE(got == hk) << "paged_kv_write_naive K differs from write_kv";
  }

  // CPU reference on the same (rounded) inputs.
  AttentionBatch cpu_batch;
  cpu_batch.num_seqs = n;
  cpu_batch.cu_seqlens_q = cu.data();
  cpu_batch.context_lens = ctx.data();
  cpu_batch.block_tables = tables.data();
  cpu_batch.max_blocks_per_seq = max_blocks;
  const float scale = 1.f / std::sqrt(float(D));
  std::vector<float> ref(q.size());
  paged_attention_ref(q.data(), c.H, host_kv, cpu_batch, scale, ref.data());

  cuda::CudaAttentionBatch batch;
  batch.num_seqs = n;
  batch.cu_seqlens_q = dcu.as<int32_t>();
  batch.context_lens = dctx.as<int32_t>();
  batch.block_tables = dtables.as<int32_t>();
  batch.max_blocks_per_seq = max_blocks;
  batch.max_q_len = max_q;
  batch.max_context_len = max_ctx;
  if (c.decode) {
    DevMem ws(cuda::paged_decode_workspace_bytes(n, c.H, c.Hkv, D, max_ctx));
    cuda::paged_decode_attention(dq.p, c.act, c.H, dev_kv, batch, scale, dout.p, ws.p, nullptr, nullptr,
                                 decode_kernel);
    // The reduce merged into the split kernel (counters), twice (each call leaves them 0): the
    // reduce kernel's result up to the order of the softmax sums' f32 additions, the same bytes
    // both times, the counters back to 0.
    DevMem counters(size_t(n) * c.Hkv * 4), merged(q_act.size());
    CUDA_OK(cudaMemset(counters.p, 0, size_t(n) * c.Hkv * 4));
    std::vector<uint8_t> first(q_act.size()), again(q_act.size()), plain(q_act.size());
    for (std::vector<uint8_t>* dst : {&first, &again}) {
      CUDA_OK(cudaMemset(merged.p, 0xff, q_act.size()));
      cuda::paged_decode_attention(dq.p, c.act, c.H, dev_kv, batch, scale, merged.p, ws.p, nullptr,
                                   counters.as<int32_t>(), decode_kernel);
      CUDA_OK(cudaMemcpy(dst->data(), merged.p, dst->size(), cudaMemcpyDeviceToHost));
    }
    CUDA_OK(cudaMemcpy(plain.data(), dout.p, plain.size(), cudaMemcpyDeviceToHost));
    EXPECT_TRUE(first == again) << "merged reduce: two calls differ";
    std::vector<int32_t> left(size_t(n) * c.Hkv, -1);
    CUDA_OK(cudaMemcpy(left.data(), counters.p, left.size() * 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(std::count(left.begin(), left.end(), 0), int64_t(left.size())) << "counters not back to 0";
    std::vector<float> a(q.size()), b(q.size());
    convert_to_f32(first.data(), c.act, a.data(), int64_t(a.size()));
    convert_to_f32(plain.data(), c.act, b.data(), int64_t(b.size()));
    // One rounding of the activation type apart at most (f32: a few f32 ulps).
    EXPECT_LE(normalized_error(a, b), c.act == DType::F32 ? 1e-5 : (c.act == DType::F16 ? 1e-3 : 8e-3))
        << "merged reduce vs reduce kernel";
  } else {
    cuda::paged_prefill_attention(dq.p, c.act, c.H, dev_kv, batch, scale, dout.p, nullptr, kernel);
  }
  const bool naive = max_ctx <= 12000;
  if (naive) cuda::paged_attention_naive(dq.p, c.act, c.H, dev_kv, batch, scale, dout_naive.p, nullptr);
  CUDA_OK(cudaDeviceSynchronize());

  std::vector<uint8_t> out_bytes(q_act.size());
  std::vector<float> out(q.size());
  CUDA_OK(cudaMemcpy(out_bytes.data(), dout.p, out_bytes.size(), cudaMemcpyDeviceToHost));
  convert_to_f32(out_bytes.data(), c.act, out.data(), int64_t(out.size()));
  // bf16 activations round the output too: allow that on top of the cache's tolerance.
  const double tol = tolerance(c.cache) + (c.act == DType::F32 ? 0.0 : 8e-3);
  EXPECT_LE(normalized_error(out, ref), tol) << (c.decode ? "decode" : "prefill") << " vs CPU reference";
  if (naive) {
    std::vector<float> out_naive(q.size());
    CUDA_OK(cudaMemcpy(out_bytes.data(), dout_naive.p, out_bytes.size(), cudaMemcpyDeviceToHost));
    convert_to_f32(out_bytes.data(), c.act, out_naive.data(), int64_t(out_naive.size()));
    EXPECT_LE(normalized_error(out_naive, ref), (c.act == DType::F32 ? 2e-5 : 8e-3)) << "naive vs CPU reference";
    // Decode against the naive kernel directly: within both their allowances from the reference.
    if (c.decode)
      EXPECT_LE(normalized_error(out, out_naive), tol + (c.act == DType::F32 ? 2e-5 : 8e-3)) << "decode vs naive kernel";
  }
}

constexpr DType F32 = DType::F32, BF16 = DType::BF16, F16 = DType::F16;

TEST(CudaAttention, PrefillMatchesCpuReference) {
  VLM_REQUIRE_GPU();
  const std::vector<Case> cases = {
      {"varlen G4 D128 B16 bf16", {{37, 37}, {64, 64}, {130, 130}, {1, 1}}, 8, 2, 128, 16, BF16, BF16},
      {"G1 D64 B32 bf16", {{100, 100}, {65, 65}}, 4, 4, 64, 32, BF16, BF16},
      {"G7 D128 B16 bf16", {{200, 200}, {17, 17}}, 14, 2, 128, 16, BF16, BF16},
      {"chunks over context G4 D128 B32 bf16", {{50, 300}, {1, 77}, {64, 200}, {129, 1000}}, 8, 2, 128, 32, BF16, BF16},
      {"chunks G7 D64 B16 f16", {{70, 170}, {3, 40}}, 7, 1, 64, 16, F16, F16},
      {"bf16 cache f32 activations", {{90, 150}, {33, 33}}, 8, 2, 128, 16, BF16, F32},
      {"f32 exact G4 D128 B16", {{37, 37}, {50, 300}, {1, 77}}, 8, 2, 128, 16, F32, F32},
      {"f32 exact G7 D64 B32", {{100, 100}, {20, 90}}, 14, 2, 64, 32, F32, F32},
      {"f32 cache bf16 activations G1", {{40, 70}}, 2, 2, 64, 16, F32, BF16},
      // Several 128-row query tiles and 128-key tiles (the sm_90 kernel's sizes), ragged ends.
      {"long varlen G7 D128 B16 bf16", {{600, 600}, {129, 129}, {255, 255}, {2, 2}}, 14, 2, 128, 16, BF16, BF16},
      {"long chunks over context G4 D128 B16 bf16", {{300, 1500}, {128, 640}, {1, 900}, {77, 77}}, 8, 2, 128, 16,
       BF16, BF16},
      {"long chunks G7 D128 B32 f16", {{400, 700}, {130, 131}}, 7, 1, 128, 32, F16, F16},
      {"long bf16 cache f32 activations G7", {{300, 450}, {200, 200}}, 14, 2, 128, 16, BF16, F32},
  };
  uint32_t seed = 1;
  // Every case through each prefill kernel (the wgmma ones on Hopper for D 128 and 16-bit caches;
  // elsewhere they fall back to mma.sync).
  for (const Case& c : cases) {
    for (auto k : {cuda::PrefillKernel::kMmaSync, cuda::PrefillKernel::kWgmma, cuda::PrefillKernel::kWgmmaWs,
                   cuda::PrefillKernel::kWgmmaPp})
      run_case(c, seed, k);
    ++seed;
  }
}

TEST(CudaAttention, DecodeMatchesCpuReference) {
  VLM_REQUIRE_GPU();
  std::vector<Seq> many;
  for (int i = 0; i < 64; ++i) many.push_back({1, 1 + 37 * i});
  const std::vector<Case> cases = {
      {"decode G7 D128 B16 bf16", {{1, 1}, {1, 100}, {1, 1000}, {1, 5000}}, 28, 4, 128, 16, BF16, BF16, true},
      {"decode one long G7 D128 B32 bf16", {{1, 20000}}, 28, 4, 128, 32, BF16, BF16, true},
      {"decode 64 seqs G4 D64 B16 bf16", many, 8, 2, 64, 16, BF16, BF16, true},
      {"decode G1 D128 B32 f16", {{1, 3000}, {1, 65}}, 4, 4, 128, 32, F16, F16, true},
      {"decode bf16 cache f32 act", {{1, 700}, {1, 2}}, 8, 2, 128, 16, BF16, F32, true},
      {"decode f32 exact G7 D128", {{1, 1}, {1, 900}, {1, 3000}}, 14, 2, 128, 16, F32, F32, true},
      {"decode f32 exact G4 D64", {{1, 500}}, 8, 2, 64, 32, F32, F32, true},
      // Issue 40's decode shapes: one sequence at 1K (v2: 16 splits of one 64-key tile, merged in
      // one staged chunk; v3: a cluster of 16), 4K (v2: 32 splits, two chunks of G 7 x D 128
      // partials; v3: 16 splits of 256 keys), 8K (32 splits of 256 keys; v3 falls back to v2), 32K
      // (86 splits: the reduce kernel); Qwen3-8B's 32/8 heads at 1K; G 16 (v2: 8 splits a chunk) at
      // a ragged 1000; one long and two short sequences (16, 1 and 3 splits: v3's empty splits in
      // the clusters of the short ones); 64 x 1K (one split each).
      {"decode 1 seq 1K G7 D128 B16 bf16", {{1, 1024}}, 28, 4, 128, 16, BF16, BF16, true},
      {"decode 1 seq 4K G7 D128 B16 bf16", {{1, 4096}}, 28, 4, 128, 16, BF16, BF16, true},
      {"decode 1 seq 8K G7 D128 B32 bf16", {{1, 8191}}, 28, 4, 128, 32, BF16, BF16, true},
      {"decode 1 seq 32K G7 D128 B16 bf16", {{1, 32768}}, 28, 4, 128, 16, BF16, BF16, true},
      {"decode 1 seq 1K G4 D128 B16 bf16 (Qwen3-8B)", {{1, 1024}}, 32, 8, 128, 16, BF16, BF16, true},
      {"decode 1 seq 1000 G16 D128 B16 bf16", {{1, 1000}}, 16, 1, 128, 16, BF16, BF16, true},
      {"decode 1 seq 1K G4 D64 B16 f16", {{1, 1024}}, 8, 2, 64, 16, F16, F16, true},
      {"decode 1 seq 1K bf16 cache f32 act", {{1, 1023}}, 28, 4, 128, 16, BF16, F32, true},
      {"decode ragged 1K/63/130 G7 D128 B16 bf16", {{1, 1024}, {1, 63}, {1, 130}}, 28, 4, 128, 16, BF16, BF16, true},
      {"decode 64 seqs x 1K G7 D128 B16 bf16", std::vector<Seq>(64, Seq{1, 1024}), 28, 4, 128, 16, BF16, BF16, true},
  };
  uint32_t seed = 100;
  // Tensor-core cases through every plan (DecodeKernel; v3 falls back to v2 where no cluster
  // applies: one split, more than 16, or before sm_90); f32 caches take the f32 kernel (one run).
  for (const Case& c : cases) {
    if (c.cache == F32) {
      run_case(c, seed++);
      continue;
    }
    for (auto k : {cuda::DecodeKernel::kV1, cuda::DecodeKernel::kV2, cuda::DecodeKernel::kV3})
      run_case(c, seed, cuda::PrefillKernel::kAuto, k);
    ++seed;
  }
}

}  // namespace
}  // namespace vlm

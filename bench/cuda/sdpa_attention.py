"""torch SDPA (FlashAttention backend) on the shapes of bench_cuda_attention: one layer of Qwen2-7B
attention (28 query heads, 4 KV heads, D = 128, bf16). Causal prefill of one sequence at 8K and
32K tokens; decode of 1 and 64 sequences at 1K, 32K, 128K context (contiguous K/V, not paged).
GQA through enable_gqa=True. CUDA-event timing (decode: 10 calls queued back to back per event pair), median, warm-up first; decode rotates among cache
copies so the working set exceeds the L2. Prints lines "sdpa <kind> ... ms=<median> <rate>"."""
import math
import sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

H, HKV, D = 28, 4, 128
dev = torch.device("cuda")


def median_ms(fn, warmup, reps, batch=1):
    """Median over reps of the time per call; each rep times `batch` calls queued back to back."""
    for i in range(warmup):
        fn(i)
    times = []
    for i in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for j in range(batch):
            fn(i * batch + j)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / batch)
    times.sort()
    return times[reps // 2]


def sdpa(q, k, v, causal):
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


def prefill(n):
    q = torch.rand(1, H, n, D, device=dev, dtype=torch.bfloat16) * 2 - 1
    k = torch.rand(1, HKV, n, D, device=dev, dtype=torch.bfloat16) * 2 - 1
    v = torch.rand(1, HKV, n, D, device=dev, dtype=torch.bfloat16) * 2 - 1
    warmup, reps = (3, 20 if n <= 8192 else 7) if n <= 65536 else (1, 3)
    ms = median_ms(lambda i: sdpa(q, k, v, True), warmup, reps)
    flops = 2.0 * n * n * D * H
    print(f"sdpa prefill tokens={n} ms={ms:.3f} tflops={flops / ms * 1e-9:.1f}", flush=True)


def decode(seqs, ctx):
    nbytes = 2.0 * seqs * ctx * HKV * D * 2
    copies = int(min(64, max(1, math.ceil(256e6 / nbytes))))
    q = torch.rand(seqs, H, 1, D, device=dev, dtype=torch.bfloat16) * 2 - 1
    ks = [torch.rand(seqs, HKV, ctx, D, device=dev, dtype=torch.bfloat16) * 2 - 1 for _ in range(copies)]
    vs = [torch.rand(seqs, HKV, ctx, D, device=dev, dtype=torch.bfloat16) * 2 - 1 for _ in range(copies)]
    ms = median_ms(lambda i: sdpa(q, ks[i % copies], vs[i % copies], False), 5, 30, 10)
    print(f"sdpa decode seqs={seqs} ctx={ctx} ms={ms:.4f} gbps={nbytes / ms * 1e-6:.0f}", flush=True)
    del ks, vs
    torch.cuda.empty_cache()


if __name__ == "__main__":
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    if len(sys.argv) > 2 and sys.argv[1] == "prefill":  # e.g. prefill 131072 262144 (long prompts)
        for n in sys.argv[2:]:
            prefill(int(n))
            torch.cuda.empty_cache()
        sys.exit(0)
    for n in (8192, 32768):
        prefill(n)
    for seqs in (1, 64):
        for ctx in (1024, 32768, 131072):
            try:
                decode(seqs, ctx)
            except RuntimeError as e:  # reported, not hidden
                print(f"sdpa decode seqs={seqs} ctx={ctx} failed: {str(e).splitlines()[0]}", flush=True)
                torch.cuda.empty_cache()

"""torch's bf16 GEMMs (cuBLAS through F.linear) on the Qwen2-7B prefill shapes, for the per-op
table of bench/RESULTS.md: y[M, N] = x[M, K] w[N, K]^T, time per call (CUDA events, median of 10
after 3 warm-up calls) and TFLOP/s. Usage: python3 bench/cuda/torch_prefill_gemms.py [M ...]"""
import sys

import torch

SHAPES = {"qkv": (4608, 3584), "o": (3584, 3584), "gate_up": (37888, 3584), "down": (3584, 18944)}


def time_ms(fn, reps=10):
    for _ in range(3):
        fn()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return sorted(ts)[len(ts) // 2]


def main():
    ms_list = [int(a) for a in sys.argv[1:]] or [8192, 32768]
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name()}")
    for M in ms_list:
        for name, (N, K) in SHAPES.items():
            x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
            t = time_ms(lambda: torch.nn.functional.linear(x, w))
            print(f"torch gemm {name} M={M} N={N} K={K}: {t:.3f} ms, {2 * M * N * K / t / 1e9:.1f} TFLOP/s")
            del x, w


if __name__ == "__main__":
    main()

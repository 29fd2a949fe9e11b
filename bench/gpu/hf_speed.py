"""The transformers peer of bench_cuda_decoder (bench/gpu_speed.sh): the same checkpoint in bf16
with SDPA attention on the same GPU, the same shapes:
  decode: B sequences of `context` random tokens (prefilled first), then `steps` greedy decode
          steps with the DynamicCache; median ms/step after 3 warm-up steps;
  prefill: one sequence of L random tokens, logits of the last row only (logits_to_keep=1),
          median of `reps` runs after one warm-up.
Prints lines in bench_cuda_decoder's format."""
import argparse
import statistics
import time

import torch
from transformers import AutoModelForCausalLM


def sync_time(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--prefill", default="8192,32768")
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16, attn_implementation="sdpa",
                                                 device_map="cuda")
    model.eval()
    experts = getattr(model.config, "_experts_implementation", None)  # MoE models: transformers 5's expert kernels
    print(f"hf load: {time.perf_counter() - t0:.1f} s, transformers model {type(model).__name__}, "
          f"torch {torch.__version__}" + (f", experts implementation {experts}" if experts else ""), flush=True)
    V = model.config.vocab_size
    g = torch.Generator(device="cuda").manual_seed(1)
    with torch.inference_mode():
        for B in [int(x) for x in a.batches.split(",")]:
            ids = torch.randint(0, V, (B, a.context), device="cuda", generator=g)
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
            pkv = out.past_key_values
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            times = []
            for k in range(a.steps + 3):
                dt, out = sync_time(lambda: model(input_ids=nxt, past_key_values=pkv, use_cache=True))
                pkv = out.past_key_values
                nxt = out.logits[:, -1].argmax(-1, keepdim=True)
                nxt.cpu()
                if k >= 3:
                    times.append(dt)
            ms = 1e3 * statistics.median(times)
            print(f"hf decode batch {B} context {a.context}: {ms:.3f} ms/step, {1e3 * B / ms:.1f} tokens/s", flush=True)
            del pkv, out
            torch.cuda.empty_cache()
        for L in [int(x) for x in a.prefill.split(",") if x and x != "0"]:
            times = []
            for r in range(a.reps + 1):
                ids = torch.randint(0, V, (1, L), device="cuda", generator=g)
                dt, out = sync_time(lambda: model(input_ids=ids, use_cache=True, logits_to_keep=1).logits.argmax(-1).cpu())
                if r > 0:
                    times.append(dt)
                torch.cuda.empty_cache()
            t = statistics.median(times)
            print(f"hf prefill {L} tokens: {t:.3f} s, {L / t:.0f} tokens/s", flush=True)


if __name__ == "__main__":
    main()

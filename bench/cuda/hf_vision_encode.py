"""The transformers peer of bench_cuda_vision: Qwen2-VL-7B's vision tower
(Qwen2VisionTransformerPretrainedModel, random weights, bf16, SDPA attention) on the same GPU and
shapes: a 448x448 image (grid 1x32x32), 8 and 64 frames of 448x448 (4x32x32, 32x32x32).
pixel_values are already on the GPU (the peer's best case); each time is one forward until the
GPU is idle, median of --reps after two warm-ups. Prints "hf vision <shape> <ms> ms"."""
import argparse
import statistics
import time

import torch
import transformers
from transformers import Qwen2VLConfig
from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VisionTransformerPretrainedModel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    vcfg = Qwen2VLConfig().vision_config  # defaults: the 7B tower (depth 32, embed 1280, out 3584)
    vcfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen2VisionTransformerPretrainedModel(vcfg).to(torch.bfloat16).eval()
    print(f"hf vision tower: transformers {transformers.__version__}, torch {torch.__version__}, "
          f"depth {vcfg.depth}, embed {vcfg.embed_dim}, out {vcfg.hidden_size}, "
          f"attn {model.config._attn_implementation}", flush=True)
    for name, grid in [("image_448", (1, 32, 32)), ("frames8_448", (4, 32, 32)), ("frames64_448", (32, 32, 32))]:
        P = grid[0] * grid[1] * grid[2]
        px = torch.randn(P, 3 * 2 * 14 * 14, device="cuda", dtype=torch.bfloat16)
        g = torch.tensor([grid], device="cuda", dtype=torch.long)
        times = []
        with torch.inference_mode():
            for r in range(a.reps + 2):
                torch.cuda.synchronize()
                t = time.perf_counter()
                out = model(px, grid_thw=g)
                torch.cuda.synchronize()
                if r >= 2:
                    times.append((time.perf_counter() - t) * 1e3)
        # transformers 5 returns the blocks' output (last_hidden_state) and the merger's
        # (pooler_output); older versions the merged rows alone.
        merged = out if torch.is_tensor(out) else out.pooler_output
        print(f"hf vision {name} {statistics.median(times):.2f} ms (min {min(times):.2f}, {P} patches, "
              f"{merged.shape[0]} merged rows)", flush=True)


if __name__ == "__main__":
    main()

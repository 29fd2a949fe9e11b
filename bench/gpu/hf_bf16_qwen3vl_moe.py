"""HF transformers' own bf16 run of the Qwen3-VL-MoE fixture (tests/fixtures/qwen3vl_moe/qwen3_vl_moe_tiny),
for the bf16 rule of tests/model/families/cuda/test_cuda_qwen3vl_moe.cpp (the Qwen3-VL-MoE twin of
hf_bf16_logits.py): loads the fixture model in bfloat16 on the GPU and runs each case of its
reference.safetensors (p<k>.ids with the case's image / video pixels and grids, as
tools/fixtures/make_qwen3_vl_fixtures.py fed the f32 model), writing OUT/qwen3_vl_moe_tiny.safetensors
with, per case k: p<k>.logits [L, V] (every prompt row, as float32), p<k>.greedy and p<k>.margin
(8 greedy tokens of the bf16 model and its top-2 margins).
Run on the GPU machine from the repository root (torch + transformers 5.17):
  python3 bench/gpu/hf_bf16_qwen3vl_moe.py tests/fixtures OUT"""
import os
import sys

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "fixtures"))
import make_qwen3_vl_fixtures as q3  # noqa: E402  (forward_logits, greedy: the fixture's own calls)

NAME = "qwen3_vl_moe_tiny"


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: hf_bf16_qwen3vl_moe.py FIXTURES_DIR OUT")
    root, out = sys.argv[1], sys.argv[2]
    d = os.path.join(root, "qwen3vl_moe", NAME)
    if not os.path.exists(os.path.join(d, "reference.safetensors")):
        sys.exit(f"no {d}/reference.safetensors")
    from transformers import Qwen3VLMoeForConditionalGeneration as M
    model = M.from_pretrained(d, dtype=torch.bfloat16, attn_implementation="sdpa").cuda().eval()
    ref = load_file(os.path.join(d, "reference.safetensors"))
    res = {}
    with torch.inference_mode():
        for k in range(8):
            p = f"p{k}"
            if p + ".ids" not in ref or p + ".logits" not in ref:
                continue
            ids = ref[p + ".ids"].long().cuda()
            kw = {}
            if p + ".image_pixels" in ref:
                kw["pixel_values"] = ref[p + ".image_pixels"].cuda().to(torch.bfloat16)
                kw["image_grid_thw"] = ref[p + ".image_grid"].long().cuda()
            if p + ".video_pixels" in ref:
                kw["pixel_values_videos"] = ref[p + ".video_pixels"].cuda().to(torch.bfloat16)
                kw["video_grid_thw"] = ref[p + ".video_grid"].long().cuda()
            logits = q3.forward_logits(model, ids, kw)
            assert logits.shape == ref[p + ".logits"].shape, (logits.shape, ref[p + ".logits"].shape)
            res[p + ".logits"] = logits.float().cpu().contiguous()
            greedy, margin = q3.greedy(model, ids, kw, int(ref[p + ".greedy"].numel()))
            res[p + ".greedy"], res[p + ".margin"] = greedy.contiguous(), margin.contiguous()
            err = ((logits.float().cpu() - ref[p + ".logits"]).abs().amax(-1) /
                   ref[p + ".logits"].abs().amax(-1).clamp_min(1e-30)).max()
            print(f"hf bf16 {NAME} {p}: {logits.shape[0]} rows, max row rel error vs f32 {float(err):.4g}", flush=True)
    os.makedirs(out, exist_ok=True)
    save_file(res, os.path.join(out, NAME + ".safetensors"))
    print(f"wrote {os.path.join(out, NAME + '.safetensors')}: {len(res) // 3} cases", flush=True)


if __name__ == "__main__":
    main()

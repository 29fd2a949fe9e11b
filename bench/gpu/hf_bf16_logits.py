"""HF transformers' own bf16 logits on the committed fixture models (tests/fixtures/models), for
the bf16 criterion of tests/model/decoder/cuda/test_cuda_decoder_fixtures.cpp: loads each model
in bfloat16 on the GPU, runs each reference prompt (reference.safetensors p<i>.ids) and writes
OUT/<model>.safetensors with p<i>.logits as float32 [len, V], and HF bf16's own greedy
continuation: p<i>.greedy int32 [n] (n = the reference's greedy length, else 16; argmax of each
step's last row, the whole sequence re-run each step) with p<i>.margin float32 [n], the top-1
minus top-2 logit at each of those steps. Run on the GPU machine:
  python3 bench/gpu/hf_bf16_logits.py tests/fixtures/models OUT"""
import os
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM


def main():
    root, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    for name in sorted(os.listdir(root)):
        ref_path = os.path.join(root, name, "reference.safetensors")
        if not os.path.exists(ref_path):
            continue
        ref = load_file(ref_path)
        try:  # a fixture written in a layout transformers does not load (qwen3_moe_f32_relayout) is skipped
            model = AutoModelForCausalLM.from_pretrained(os.path.join(root, name), dtype=torch.bfloat16,
                                                         attn_implementation="eager").cuda().eval()
        except Exception as e:  # noqa: BLE001 (any load failure: report and go on)
            print(f"hf bf16 logits: {name} skipped ({type(e).__name__}: {e})", flush=True)
            continue
        res = {}
        with torch.inference_mode():
            i = 0
            while f"p{i}.ids" in ref:
                ids = ref[f"p{i}.ids"].to(torch.long).cuda()[None]
                res[f"p{i}.logits"] = model(input_ids=ids).logits[0].float().cpu().contiguous()
                n = ref[f"p{i}.greedy"].numel() if f"p{i}.greedy" in ref else 16
                toks, margins = [], []
                for _ in range(n):
                    last = model(input_ids=ids).logits[0, -1].float()
                    top = torch.topk(last, 2).values
                    nxt = int(torch.argmax(last))
                    toks.append(nxt)
                    margins.append(float(top[0] - top[1]))
                    ids = torch.cat([ids, torch.tensor([[nxt]], device=ids.device)], dim=1)
                res[f"p{i}.greedy"] = torch.tensor(toks, dtype=torch.int32)
                res[f"p{i}.margin"] = torch.tensor(margins, dtype=torch.float32)
                i += 1
        save_file(res, os.path.join(out, name + ".safetensors"))
        print(f"hf bf16 logits: {name}, {i} prompts", flush=True)


if __name__ == "__main__":
    main()

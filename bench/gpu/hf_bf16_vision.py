"""HF transformers' own bf16 vision embeddings on the committed vision fixtures, for the bf16
criterion of tests/model/vision/cuda/test_cuda_vision_towers.cpp (the vision twin of
hf_bf16_logits.py): loads each fixture model in bfloat16 on the GPU and runs its vision side on
the inputs the test feeds ours, writing OUT/<model>.vision.safetensors with float32 rows:
  Qwen2-VL / Qwen2.5-VL (tests/fixtures/qwen2vl/<model>): p<k>.image_embeds, p<k>.video_embeds
    (vision tower + merger) of the img_small / vid_small pixels of preprocess.safetensors;
  LLaVA (tests/fixtures/llava/<model>): p<k>.proj (CLIP hidden state -2, class row dropped,
    projector) of the prompt's pixels (reference p<k>.pixels, else clip336.coffee.pixels).
Run on the GPU machine:
  python3 bench/gpu/hf_bf16_vision.py tests/fixtures OUT"""
import os
import sys

import torch
from safetensors.torch import load_file, save_file

# The media of each Qwen2-VL fixture prompt (as the test builds them).
QWEN_IMAGES = [["cat"], [], ["synth", "rocket"]]
QWEN_VIDEOS = [[], ["shapes4"], ["shapes4"]]


def inner(model, name):
    m = getattr(model, "model", model)
    return getattr(m, name) if hasattr(m, name) else getattr(model, name)


def merged_rows(out):
    if torch.is_tensor(out):
        return out
    return out.pooler_output  # transformers 5: the merger's rows


def qwen(root, name, out):
    from transformers import Qwen2_5_VLForConditionalGeneration, Qwen2VLForConditionalGeneration
    d = os.path.join(root, "qwen2vl", name)
    M = Qwen2_5_VLForConditionalGeneration if "2_5" in name else Qwen2VLForConditionalGeneration
    model = M.from_pretrained(d, dtype=torch.bfloat16, attn_implementation="sdpa").cuda().eval()
    visual = inner(model, "visual")
    pre = load_file(os.path.join(root, "qwen2vl", "preprocess.safetensors"))
    res = {}
    with torch.inference_mode():
        for k in range(len(QWEN_IMAGES)):
            for video, names in ((False, QWEN_IMAGES[k]), (True, QWEN_VIDEOS[k])):
                if not names:
                    continue
                keys = [("vid_small." if video else "img_small.") + n for n in names]
                pv = torch.cat([pre[key + ".pixels"] for key in keys]).cuda().to(torch.bfloat16)
                grid = torch.stack([pre[key + ".grid"] for key in keys]).long().cuda()
                rows = merged_rows(visual(pv, grid_thw=grid))
                res[f"p{k}." + ("video_embeds" if video else "image_embeds")] = rows.float().cpu().contiguous()
    save_file(res, os.path.join(out, name + ".vision.safetensors"))
    print(f"hf bf16 vision: {name}, {len(res)} embeddings", flush=True)


def llava(root, name, out):
    from transformers import LlavaForConditionalGeneration
    d = os.path.join(root, "llava", name)
    model = LlavaForConditionalGeneration.from_pretrained(d, dtype=torch.bfloat16,
                                                          attn_implementation="sdpa").cuda().eval()
    vt, mmp = inner(model, "vision_tower"), inner(model, "multi_modal_projector")
    ref = load_file(os.path.join(d, "reference.safetensors"))
    pre = load_file(os.path.join(root, "llava", "preprocess.safetensors"))
    res = {}
    with torch.inference_mode():
        k = 0
        while f"p{k}.proj" in ref:
            pv = ref[f"p{k}.pixels"] if f"p{k}.pixels" in ref else pre["clip336.coffee.pixels"]
            pv = pv.reshape(-1, *pv.shape[-3:])  # [N, 3, S, S] (the preprocess file's one image: [3, S, S])
            hs = vt(pv.cuda().to(torch.bfloat16), output_hidden_states=True).hidden_states
            res[f"p{k}.proj"] = mmp(hs[-2][:, 1:]).float().cpu().contiguous()
            k += 1
    save_file(res, os.path.join(out, name + ".vision.safetensors"))
    print(f"hf bf16 vision: {name}, {k} prompts", flush=True)


def main():
    root, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    for name in ("qwen2_vl_tiny", "qwen2_5_vl_tiny"):
        qwen(root, name, out)
    for name in ("llava_small", "llava_336"):
        llava(root, name, out)


if __name__ == "__main__":
    main()

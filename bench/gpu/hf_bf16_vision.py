"""HF transformers' own bf16 vision embeddings on the committed vision fixtures, for the bf16
criterion of tests/model/vision/cuda/test_cuda_vision_towers.cpp (the vision twin of
hf_bf16_logits.py): loads each fixture model in bfloat16 on the GPU and runs its vision side on
the inputs the test feeds ours, writing OUT/<model>.vision.safetensors with float32 rows:
  Qwen2-VL / Qwen2.5-VL (tests/fixtures/qwen2vl/<model>): p<k>.image_embeds, p<k>.video_embeds
    (vision tower + merger) of the img_small / vid_small pixels of preprocess.safetensors;
  LLaVA (tests/fixtures/llava/<model>): p<k>.proj (CLIP hidden state -2, class row dropped,
    projector) of the prompt's pixels (reference p<k>.pixels, else clip336.coffee.pixels);
  LLaVA-OneVision (tests/fixtures/llava_onevision_gpu/ov_gpu, written as ov_gpu.vision.safetensors):
    <case>.rows, the case's packed image features then its video features (the model's
    image_hidden_states / video_hidden_states in a bf16 forward of the case's input_ids), for the
    cases whose pixels the reference records: the one-image cases (pixels from their PIL-backend
    levels, mean = std = 0.5) and the video-only one (pixel_values_videos).
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


def onevision(root, out):
    import json
    from transformers import LlavaOnevisionForConditionalGeneration
    base = os.path.join(root, "llava_onevision_gpu")
    d = os.path.join(base, "ov_gpu")
    model = LlavaOnevisionForConditionalGeneration.from_pretrained(d, dtype=torch.bfloat16,
                                                                   attn_implementation="sdpa").cuda().eval()
    ref = load_file(os.path.join(base, "reference.safetensors"))
    with open(os.path.join(d, "cases.json")) as f:
        cases = json.load(f)
    res = {}
    with torch.inference_mode():
        for c in cases:
            name = c["name"]
            kw = {"input_ids": torch.tensor([c["input_ids"]]).cuda(), "use_cache": False}
            if c["num_image_tokens"] > 0:
                if f"{name}.levels_pil" not in ref:
                    continue  # images whose pixels the trimmed reference does not keep
                lv = ref[f"{name}.levels_pil"].float()  # [1, N, 3, S, S]
                kw["pixel_values"] = ((lv / 255.0 - 0.5) / 0.5).cuda().to(torch.bfloat16)
                kw["image_sizes"] = torch.tensor(c["image_sizes"]).cuda()
                if c.get("batch_num_images") is not None:
                    kw["batch_num_images"] = torch.tensor(c["batch_num_images"]).cuda()
            if c["num_video_tokens"] > 0:
                kw["pixel_values_videos"] = ref[f"{name}.video"].cuda().to(torch.bfloat16)
            o = model(**kw)
            rows = []
            ih = getattr(o, "image_hidden_states", None)
            if ih is not None:
                ih = torch.cat(list(ih), 0) if isinstance(ih, (list, tuple)) else ih
                rows.append(ih.reshape(-1, ih.shape[-1]))
            vh = getattr(o, "video_hidden_states", None)
            if vh is not None:
                rows.append(vh.reshape(-1, vh.shape[-1]))
            res[f"{name}.rows"] = torch.cat(rows, 0).float().cpu().contiguous()
    save_file(res, os.path.join(out, "ov_gpu.vision.safetensors"))
    print(f"hf bf16 vision: ov_gpu, {len(res)} cases", flush=True)


def main():
    root, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    for name in ("qwen2_vl_tiny", "qwen2_5_vl_tiny"):
        qwen(root, name, out)
    for name in ("llava_small", "llava_336"):
        llava(root, name, out)
    onevision(root, out)


if __name__ == "__main__":
    main()

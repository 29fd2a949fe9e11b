#!/usr/bin/env python3
"""A random-weight Qwen2-VL checkpoint with a given text decoder, for multimodal benches.

    bench/make_qwen2vl_random.py TEXT_DIR OUT_DIR

TEXT_DIR: a Qwen2 text checkpoint from tools/vlm-random-model (config.json, model.safetensors,
tokenizer files), e.g. `vlm-random-model --preset qwen2-0.5b --tokenizer-from tests/data/tokenizers/qwen3`.
OUT_DIR gets a Qwen2VLForConditionalGeneration whose language model is TEXT_DIR's (its shape and
bytes) and whose vision tower is the tiny one of the test fixture tests/fixtures/qwen2vl_server/
qwen2_vl_chat (embed 32, depth 2; chat template and image processor from there too, the image
size cap raised to Qwen2-VL's own), with the
merger's last projection drawn anew (N(0, 0.02), seed 1) to the text hidden size. The numbers are
meaningless; the point is a decoder of a real size behind a real image path (preprocessing, vision
encoder, M-RoPE positions, image tokens in the prefix cache).
"""
import json
import os
import random
import shutil
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "qwen2vl_server", "qwen2_vl_chat")


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)), 8 + n


def bf16_bytes(values):
    out = bytearray()
    for v in values:
        out += struct.pack("<f", v)[2:4]  # truncation is fine for random numbers
    return bytes(out)


def main():
    text_dir, out_dir = sys.argv[1], sys.argv[2]
    tcfg = json.load(open(os.path.join(text_dir, "config.json")))
    cfg = json.load(open(os.path.join(FIXTURE, "config.json")))
    H = tcfg["hidden_size"]
    head_dim = H // tcfg["num_attention_heads"]
    tc = cfg["text_config"]
    for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "rms_norm_eps", "tie_word_embeddings"):
        tc[k] = tcfg[k]
    tc["layer_types"] = ["full_attention"] * tcfg["num_hidden_layers"]
    half = head_dim // 2  # M-RoPE sections (t, h, w) over head_dim / 2 frequencies, Qwen2-VL's 1:1.5:1.5
    tc["rope_parameters"]["mrope_section"] = [half // 4, (half - half // 4) // 2, half - half // 4 - (half - half // 4) // 2]
    cfg["tie_word_embeddings"] = tcfg["tie_word_embeddings"]
    cfg["vision_config"]["hidden_size"] = H  # the merger's output width
    assert cfg["text_config"]["vocab_size"] == tcfg["vocab_size"]

    text_st = os.path.join(text_dir, "model.safetensors")
    th, tstart = read_header(text_st)
    vh, vstart = read_header(os.path.join(FIXTURE, "model.safetensors"))
    rng = random.Random(1)
    extra = {}  # name -> (dtype, shape, bytes) of the vision tensors
    with open(os.path.join(FIXTURE, "model.safetensors"), "rb") as f:
        for name, info in vh.items():
            if name == "__metadata__" or not name.startswith("visual."):
                continue
            if name in ("visual.merger.mlp.2.weight", "visual.merger.mlp.2.bias"):
                shape = [H] + info["shape"][1:]
                n = 1
                for d in shape:
                    n *= d
                extra[name] = ("BF16", shape, bf16_bytes(rng.gauss(0.0, 0.02) for _ in range(n)))
                continue
            b, e = info["data_offsets"]
            f.seek(vstart + b)
            extra[name] = (info["dtype"], info["shape"], f.read(e - b))

    header = {}
    text_end = 0
    for name, info in th.items():
        if name == "__metadata__":
            continue
        header[name] = info
        text_end = max(text_end, info["data_offsets"][1])
    off = text_end
    for name, (dt, shape, data) in sorted(extra.items()):
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "model.safetensors"), "wb") as out, open(text_st, "rb") as src:
        out.write(struct.pack("<Q", len(hb)) + hb)
        src.seek(tstart)
        left = text_end
        while left > 0:
            chunk = src.read(min(left, 64 << 20))
            out.write(chunk)
            left -= len(chunk)
        for name, (_, _, data) in sorted(extra.items()):
            out.write(data)
    json.dump(cfg, open(os.path.join(out_dir, "config.json"), "w"), indent=2)
    for f in ("chat_template.jinja", "generation_config.json"):
        shutil.copy(os.path.join(FIXTURE, f), out_dir)
    # The fixture caps images at 50,176 pixels (64 tokens); Qwen2-VL's released processor at
    # 12,845,056: a photo then keeps its size (a 640x480 one: ~390 image tokens).
    pre = json.load(open(os.path.join(FIXTURE, "preprocessor_config.json")))
    pre["size"]["longest_edge"] = 12845056
    json.dump(pre, open(os.path.join(out_dir, "preprocessor_config.json"), "w"), indent=2)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(text_dir, f), out_dir)
    print(f"wrote {out_dir}: Qwen2-VL, text {tcfg['num_hidden_layers']} layers x {H}, "
          f"mrope_section {tc['rope_parameters']['mrope_section']}, {len(header)} tensors")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A Qwen3-MoE checkpoint with random bf16 weights, reproducible tensor by tensor, written either as a
Hugging Face directory (config.json + model.safetensors, for us and transformers) or as a GGUF file
(for llama.cpp), one after the other from the same generator: both hold the same weights bit for bit
(issue 41's 30B-A3B rows on one H200: the bf16 checkpoint and its GGUF are ~61 GB each and the disk
holds one of them; bench/cuda/moe_rows.sh makes one, measures, deletes it, makes the other).

Each unit of weights is drawn from its own generator seeded by (seed, its Hugging Face name): the
per-expert names model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight for the experts, the
checkpoint's names for the rest. A unit's values do not depend on which other units were drawn or
in what order. Values ~ N(0, std) rounded to bf16; norm weights 1.
  safetensors: the experts fused as transformers 5 saves them: mlp.experts.gate_up_proj [E, 2I, C]
               (expert e's gate rows [0, I), then its up rows [I, 2I)), mlp.experts.down_proj [E, C, I];
  gguf:        llama.cpp's qwen3moe as bench/hf_to_gguf.py writes it from that directory (its
               gguf_metadata and write_gguf): ffn_gate_exps / ffn_up_exps / ffn_down_exps stacked in
               expert order, router and norms widened to F32 (the same values).
A line "units digest: HEX" (sha256 over each unit's name and first 64 bytes, in name order) is printed
and written to OUT.digest: the two formats' runs print the same digest when they drew the same weights.

Backends: torch (--device cuda: ~61 GB drawn in seconds; the disk sets the pace) and python (the
standard library alone, for tiny shapes: tests/bench/check_qwen3moe_gguf.py). The two draw different
numbers; a pair of files must come from one backend on one machine.

Usage: make_qwen3moe_random.py --out PATH --format safetensors|gguf [--preset qwen3-30b-a3b|tiny]
         [--layers N] [--seed S] [--std X] [--backend torch|python] [--device cuda|cpu]
  safetensors: PATH is a directory (config.json, model.safetensors, units.digest); gguf: PATH is the
  .gguf file (and PATH.digest); hf_to_gguf.py of directory D writes the same bytes as --format gguf
  --out D.gguf (general.name is the directory's name).
"""
import argparse
import hashlib
import json
import os
import random
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import hf_to_gguf as g  # noqa: E402  (gguf_metadata, write_gguf, GgufTensor, widen_to_f32)

COMMON = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "norm_topk_prob": True,
          "decoder_sparse_step": 1, "mlp_only_layers": [], "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
          "tie_word_embeddings": False, "attention_bias": False, "hidden_act": "silu", "torch_dtype": "bfloat16"}
PRESETS = {
    # Qwen3-30B-A3B's text shape (Qwen3-VL-30B-A3B's decoder but for its M-RoPE), as vlm-random-model's
    # preset of the same name: 48 layers, all MoE, 128 experts of 768, top 8 renormalised. ~61 GB.
    "qwen3-30b-a3b": {"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 48,
                      "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
                      "num_experts_per_tok": 8, "moe_intermediate_size": 768, "max_position_embeddings": 40960,
                      "bos_token_id": 151643, "eos_token_id": 151645},
    # For tests: every shape small and distinct (2I = 64 != C = 48: the fused shapes read one way only).
    "tiny": {"vocab_size": 256, "hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_experts": 8,
             "num_experts_per_tok": 2, "moe_intermediate_size": 32, "max_position_embeddings": 512,
             "bos_token_id": 1, "eos_token_id": 2},
}
ONE_BF16 = b"\x80\x3f"


def config(preset, layers):
    c = dict(COMMON, **PRESETS[preset])
    if layers:
        c["num_hidden_layers"] = layers
    return c


def unit_seed(seed, name):
    return int.from_bytes(hashlib.sha256(f"{seed}/{name}".encode()).digest()[:8], "little") & ((1 << 63) - 1)


class Draw:
    """draw(name, numel, ones) -> bf16 bytes of the unit `name`."""

    def __init__(self, backend, device, seed, std):
        self.backend, self.device, self.seed, self.std = backend, device, seed, std
        self.digest = {}  # name -> first 64 bytes
        if backend == "torch":
            import torch
            self.torch = torch

    def __call__(self, name, numel, ones=False):
        if ones:
            raw = ONE_BF16 * numel
        elif self.backend == "torch":
            t = self.torch
            gen = t.Generator(device=self.device).manual_seed(unit_seed(self.seed, name))
            x = (t.randn(numel, generator=gen, device=self.device, dtype=t.float32) * self.std).to(t.bfloat16)
            raw = x.view(t.int16).cpu().numpy().tobytes()
        else:
            rng = random.Random(unit_seed(self.seed, name))
            out = bytearray(2 * numel)
            for i in range(numel):
                (bits,) = struct.unpack("<I", struct.pack("<f", rng.gauss(0.0, self.std)))
                bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
                struct.pack_into("<H", out, 2 * i, bits)
            raw = bytes(out)
        self.digest[name] = raw[:64]
        return raw

    def hex_digest(self):
        h = hashlib.sha256()
        for name in sorted(self.digest):
            h.update(name.encode() + b"\0" + self.digest[name])
        return h.hexdigest()


def expert_unit(layer, e, proj):
    return f"model.layers.{layer}.mlp.experts.{e}.{proj}.weight"


def plain_units(c):
    """(name, shape, ones) of every tensor but the experts, in the checkpoint's names."""
    C, V, D = c["hidden_size"], c["vocab_size"], c["head_dim"]
    QD, KD, E = c["num_attention_heads"] * D, c["num_key_value_heads"] * D, c["num_experts"]
    out = [("model.embed_tokens.weight", [V, C], False), ("model.norm.weight", [C], True),
           ("lm_head.weight", [V, C], False)]
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        out += [(p + "input_layernorm.weight", [C], True), (p + "post_attention_layernorm.weight", [C], True),
                (p + "self_attn.q_proj.weight", [QD, C], False), (p + "self_attn.k_proj.weight", [KD, C], False),
                (p + "self_attn.v_proj.weight", [KD, C], False), (p + "self_attn.o_proj.weight", [C, QD], False),
                (p + "self_attn.q_norm.weight", [D], True), (p + "self_attn.k_norm.weight", [D], True),
                (p + "mlp.gate.weight", [E, C], False)]
    return out


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def safetensors_tensors(c, draw):
    """(name, shape, chunks) of the Hugging Face checkpoint, experts fused as transformers 5 saves them."""
    C, E, I = c["hidden_size"], c["num_experts"], c["moe_intermediate_size"]
    out = [(n, s, (lambda n=n, s=s, o=o: iter([draw(n, numel(s), o)]))) for n, s, o in plain_units(c)]
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}.mlp.experts."

        def gate_up(l=l):
            for e in range(E):
                yield draw(expert_unit(l, e, "gate_proj"), I * C)
                yield draw(expert_unit(l, e, "up_proj"), I * C)

        def down(l=l):
            for e in range(E):
                yield draw(expert_unit(l, e, "down_proj"), C * I)
        out += [(p + "gate_up_proj", [E, 2 * I, C], gate_up), (p + "down_proj", [E, C, I], down)]
    return out


def write_safetensors(out_dir, c, draw):
    tensors = sorted(safetensors_tensors(c, draw), key=lambda t: t[0])
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, _ in tensors:
        n = 2 * numel(shape)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((-len(hb)) % 8)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "model.safetensors")
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb)
        for name, shape, chunks in tensors:
            n = 0
            for b in chunks():
                f.write(b)
                n += len(b)
            assert n == 2 * numel(shape), name
    os.replace(path + ".tmp", path)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    return len(tensors), offset


def gguf_tensors(c, draw):
    """The GGUF tensors bench/hf_to_gguf.py writes from the safetensors above, drawn directly."""
    C, E, I = c["hidden_size"], c["num_experts"], c["moe_intermediate_size"]
    out = []
    for name, shape, ones in plain_units(c):
        gname = g.hf_to_gguf_name(name)
        widen = len(shape) == 1 or gname.endswith("ffn_gate_inp.weight")
        n = numel(shape)
        out.append(g.GgufTensor(gname, list(reversed(shape)), g.GGML_TYPES["F32" if widen else "BF16"],
                                (4 if widen else 2) * n,
                                lambda name=name, n=n, ones=ones, widen=widen: iter(
                                    [g.widen_to_f32(draw(name, n, ones), "BF16") if widen else draw(name, n, ones)])))
    for l in range(c["num_hidden_layers"]):
        for proj, gname, dims in (("gate_proj", "ffn_gate_exps", [C, I, E]), ("up_proj", "ffn_up_exps", [C, I, E]),
                                  ("down_proj", "ffn_down_exps", [I, C, E])):
            out.append(g.GgufTensor(f"blk.{l}.{gname}.weight", dims, g.GGML_TYPES["BF16"], 2 * E * I * C,
                                    lambda l=l, proj=proj: (draw(expert_unit(l, e, proj), I * C) for e in range(E))))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--format", required=True, choices=["safetensors", "gguf"])
    ap.add_argument("--preset", default="qwen3-30b-a3b", choices=sorted(PRESETS))
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--std", type=float, default=0.02)
    ap.add_argument("--backend", default="torch", choices=["torch", "python"])
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    c = config(a.preset, a.layers)
    draw = Draw(a.backend, a.device, a.seed, a.std)
    t0 = time.time()
    if a.format == "safetensors":
        n, nbytes = write_safetensors(a.out, c, draw)
        digest_path = os.path.join(a.out, "units.digest")
    else:
        g.check_moe_config(c)
        # general.name as hf_to_gguf.py writes it from a directory named as the file less ".gguf"
        general_name = os.path.basename(a.out).removesuffix(".gguf")
        n = g.write_gguf(a.out, g.gguf_metadata(c, general_name), gguf_tensors(c, draw))
        nbytes = os.path.getsize(a.out)
        digest_path = a.out + ".digest"
    d = draw.hex_digest()
    with open(digest_path, "w") as f:
        f.write(d + "\n")
    print(f"wrote {a.out} ({a.format}, preset {a.preset}, seed {a.seed}, {a.backend}): {n} tensors, "
          f"{nbytes / 1e9:.2f} GB in {time.time() - t0:.1f} s", flush=True)
    print(f"units digest: {d}", flush=True)


if __name__ == "__main__":
    main()

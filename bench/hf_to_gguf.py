#!/usr/bin/env python3
"""Writes a GGUF file (llama.cpp's model format) from a Qwen2 or Qwen3 Hugging Face checkpoint directory
(config.json + one model.safetensors), for the side-by-side CPU benchmark bench/peer_llamacpp.sh.

Written from the public GGUF specification (ggml's docs/gguf.md): little-endian header "GGUF",
version 3, tensor count, metadata count; metadata key/value pairs; tensor infos (name, dims with
the fastest-varying first, ggml type, offset into the data section); the data section aligned to
32 bytes. Tensor bytes are copied unchanged (BF16 -> ggml type 30, F16 -> 1, F32 -> 0), so the
GGUF holds exactly the checkpoint's weights, except that 1-D tensors (norm weights, biases) are
widened to F32 as llama.cpp's own converter stores them (its CPU ops add an f32 activation to an
f32 bias or scale, not to a bf16 one). Tensor and key names follow llama.cpp's "qwen2"
architecture ("qwen3" for Qwen3: the per-head q/k norms as blk.N.attn_q_norm / attn_k_norm, and
the head size as qwen3.attention.key_length / value_length). No vocabulary is written (tokenizer.ggml.model = "none" with qwen2.vocab_size):
llama-bench and llama-batched-bench draw random token ids and never tokenize text.

Only the Python standard library is used. Usage: bench/hf_to_gguf.py MODEL_DIR OUT.gguf
"""
import json
import os
import struct
import sys

ALIGN = 32
GGML_TYPES = {"BF16": 30, "F16": 1, "F32": 0}
# GGUF metadata value types
T_UINT32, T_FLOAT32, T_BOOL, T_STRING = 4, 6, 7, 8


def gguf_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, value):
    out = gguf_str(key) + struct.pack("<I", vtype)
    if vtype == T_UINT32:
        out += struct.pack("<I", value)
    elif vtype == T_FLOAT32:
        out += struct.pack("<f", value)
    elif vtype == T_BOOL:
        out += struct.pack("<B", 1 if value else 0)
    elif vtype == T_STRING:
        out += gguf_str(value)
    else:
        raise ValueError(vtype)
    return out


def hf_to_gguf_name(name):
    """HF Qwen2 / Qwen3 tensor name -> llama.cpp qwen2 / qwen3 tensor name (None: not needed)."""
    simple = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    if name in simple:
        return simple[name]
    parts = name.split(".")
    if len(parts) < 5 or parts[0] != "model" or parts[1] != "layers":
        return None
    layer, rest = parts[2], ".".join(parts[3:])
    per_layer = {
        "input_layernorm.weight": "attn_norm.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.q_proj.bias": "attn_q.bias",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.k_proj.bias": "attn_k.bias",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.v_proj.bias": "attn_v.bias",
        "self_attn.o_proj.weight": "attn_output.weight",
        "self_attn.q_norm.weight": "attn_q_norm.weight",
        "self_attn.k_norm.weight": "attn_k_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
    return f"blk.{layer}.{per_layer[rest]}" if rest in per_layer else None


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: hf_to_gguf.py MODEL_DIR OUT.gguf")
    model_dir, out_path = sys.argv[1], sys.argv[2]
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") not in ("qwen2", "qwen3"):
        sys.exit(f"hf_to_gguf.py: only qwen2 and qwen3 checkpoints (got {cfg.get('model_type')})")
    st_path = os.path.join(model_dir, "model.safetensors")
    with open(st_path, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(hlen))
    base = 8 + hlen
    tensors = []  # (gguf name, dims ne0-first, ggml type, file offset, byte length)
    for name, info in header.items():
        if name == "__metadata__":
            continue
        gname = hf_to_gguf_name(name)
        if gname is None:
            sys.exit(f"hf_to_gguf.py: unexpected tensor {name}")
        if info["dtype"] not in GGML_TYPES:
            sys.exit(f"hf_to_gguf.py: {name} has dtype {info['dtype']}")
        begin, end = info["data_offsets"]
        widen = len(info["shape"]) == 1 and info["dtype"] != "F32"
        tensors.append((gname, list(reversed(info["shape"])), GGML_TYPES["F32" if widen else info["dtype"]],
                        base + begin, end - begin, info["dtype"] if widen else None))
    tensors.sort(key=lambda t: t[0])

    arch = cfg["model_type"]
    meta = [
        kv("general.architecture", T_STRING, arch),
        kv("general.name", T_STRING, os.path.basename(os.path.normpath(model_dir))),
        kv("general.alignment", T_UINT32, ALIGN),
        kv(f"{arch}.context_length", T_UINT32, cfg["max_position_embeddings"]),
        kv(f"{arch}.embedding_length", T_UINT32, cfg["hidden_size"]),
        kv(f"{arch}.block_count", T_UINT32, cfg["num_hidden_layers"]),
        kv(f"{arch}.feed_forward_length", T_UINT32, cfg["intermediate_size"]),
        kv(f"{arch}.attention.head_count", T_UINT32, cfg["num_attention_heads"]),
        kv(f"{arch}.attention.head_count_kv", T_UINT32, cfg["num_key_value_heads"]),
        kv(f"{arch}.rope.freq_base", T_FLOAT32, cfg["rope_theta"]),
        kv(f"{arch}.attention.layer_norm_rms_epsilon", T_FLOAT32, cfg["rms_norm_eps"]),
        kv(f"{arch}.vocab_size", T_UINT32, cfg["vocab_size"]),
        kv("tokenizer.ggml.model", T_STRING, "none"),
    ]
    if arch == "qwen3":  # head_dim is independent of hidden / heads in Qwen3
        head_dim = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
        meta += [kv(f"{arch}.attention.key_length", T_UINT32, head_dim),
                 kv(f"{arch}.attention.value_length", T_UINT32, head_dim)]
    infos = b""
    offset = 0
    data_offsets = []
    for gname, dims, gtype, _, nbytes, widen in tensors:
        nbytes = nbytes * 2 if widen else nbytes
        infos += gguf_str(gname) + struct.pack("<I", len(dims))
        infos += b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", gtype, offset)
        data_offsets.append(offset)
        offset = (offset + nbytes + ALIGN - 1) // ALIGN * ALIGN
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta)) + b"".join(meta) + infos
    head += b"\0" * ((-len(head)) % ALIGN)

    tmp = out_path + ".tmp"
    with open(st_path, "rb") as src, open(tmp, "wb") as out:
        out.write(head)
        for (gname, _, _, src_off, nbytes, widen), doff in zip(tensors, data_offsets):
            out.write(b"\0" * (len(head) + doff - out.tell()))
            src.seek(src_off)
            if widen:  # a small 1-D tensor: 16-bit -> f32
                raw = src.read(nbytes)
                vals = struct.unpack(f"<{nbytes // 2}e", raw) if widen == "F16" else None
                if widen == "BF16":
                    out.write(b"".join(b"\0\0" + raw[i:i + 2] for i in range(0, nbytes, 2)))
                else:
                    out.write(struct.pack(f"<{len(vals)}f", *vals))
                continue
            left = nbytes
            while left:
                chunk = src.read(min(left, 1 << 24))
                if not chunk:
                    sys.exit(f"hf_to_gguf.py: {st_path} ends inside {gname}")
                out.write(chunk)
                left -= len(chunk)
    os.replace(tmp, out_path)
    print(f"wrote {out_path}: {len(tensors)} tensors, {os.path.getsize(out_path) / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()

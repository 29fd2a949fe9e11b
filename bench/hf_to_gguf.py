#!/usr/bin/env python3
"""Writes a GGUF file (llama.cpp's model format) from a Qwen2, Qwen3 or Qwen3-MoE Hugging Face checkpoint
directory (config.json + one model.safetensors), for the side-by-side benchmarks bench/peer_llamacpp.sh and
bench/cuda/moe_rows.sh (whose generator, bench/cuda/make_qwen3moe_random.py, writes GGUF through
write_gguf and gguf_metadata below).

Written from the public GGUF specification (ggml's docs/gguf.md): little-endian header "GGUF",
version 3, tensor count, metadata count; metadata key/value pairs; tensor infos (name, dims with
the fastest-varying first, ggml type, offset into the data section); the data section aligned to
32 bytes. Tensor bytes are copied unchanged (BF16 -> ggml type 30, F16 -> 1, F32 -> 0), so the
GGUF holds exactly the checkpoint's weights, except that 1-D tensors (norm weights, biases) are
widened to F32 as llama.cpp's own converter stores them (its CPU ops add an f32 activation to an
f32 bias or scale, not to a bf16 one). Tensor and key names follow llama.cpp's "qwen2"
architecture ("qwen3" for Qwen3: the per-head q/k norms as blk.N.attn_q_norm / attn_k_norm, and
the head size as qwen3.attention.key_length / value_length; "qwen3moe" for Qwen3-MoE: the router as
blk.N.ffn_gate_inp.weight, widened to F32 as llama.cpp's converter stores it, and the experts as
three 3-D tensors blk.N.ffn_{gate,up,down}_exps.weight of ggml shape {C, I, E} / {C, I, E} / {I, C, E}:
fused gate_up_proj [E, 2I, C] (transformers 5) split into its gate rows [0, I) and up rows [I, 2I)
per expert, or per-expert gate/up/down_proj stacked in expert order; with qwen3moe.expert_count,
expert_used_count and expert_feed_forward_length. llama.cpp's qwen3moe graph renormalises the top-k
weights and has no dense layers: a checkpoint with norm_topk_prob false or mlp_only_layers is refused,
as is the transposed fused layout [E, C, 2I]). No vocabulary is written (tokenizer.ggml.model = "none" with qwen2.vocab_size):
llama-bench and llama-batched-bench draw random token ids and never tokenize text.

Only the Python standard library is used. Usage: bench/hf_to_gguf.py MODEL_DIR OUT.gguf
Facts checked against llama.cpp d32676d77 (unslothai/llama.cpp: src/llama-arch.cpp's key and tensor
names, src/models/qwen3moe.cpp's tensor shapes, conversion/qwen.py's gate_up split).
"""
import json
import os
import re
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


ARCHS = {"qwen2": "qwen2", "qwen3": "qwen3", "qwen3_moe": "qwen3moe"}  # HF model_type -> llama.cpp arch
DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4}


def hf_to_gguf_name(name):
    """HF Qwen2 / Qwen3 / Qwen3-MoE tensor name -> llama.cpp tensor name (None: not one tensor of its
    own: the experts, or not needed)."""
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
        "mlp.gate.weight": "ffn_gate_inp.weight",  # the MoE router [E, C]
    }
    return f"blk.{layer}.{per_layer[rest]}" if rest in per_layer else None


def moe_dims(cfg):
    """(E experts, top k, expert intermediate I) of a qwen3_moe config (either expert-count field)."""
    E = cfg.get("num_experts", cfg.get("num_local_experts"))
    return E, cfg["num_experts_per_tok"], cfg["moe_intermediate_size"]


def check_moe_config(cfg):
    """Refuses what llama.cpp's qwen3moe graph does not compute (it renormalises, every layer MoE)."""
    if not cfg.get("norm_topk_prob", False):
        sys.exit("hf_to_gguf.py: norm_topk_prob false: llama.cpp's qwen3moe always renormalises the top-k weights")
    if cfg.get("mlp_only_layers") or cfg.get("decoder_sparse_step", 1) != 1:
        sys.exit("hf_to_gguf.py: dense layers (mlp_only_layers / decoder_sparse_step): llama.cpp's qwen3moe has "
                 "none")


def gguf_metadata(cfg, general_name):
    """The metadata key/value records (bytes) llama.cpp reads for cfg's architecture."""
    arch = ARCHS[cfg["model_type"]]
    meta = [
        kv("general.architecture", T_STRING, arch),
        kv("general.name", T_STRING, general_name),
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
    if arch in ("qwen3", "qwen3moe"):  # head_dim is independent of hidden / heads in Qwen3
        head_dim = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
        meta += [kv(f"{arch}.attention.key_length", T_UINT32, head_dim),
                 kv(f"{arch}.attention.value_length", T_UINT32, head_dim)]
    if arch == "qwen3moe":
        E, K, I = moe_dims(cfg)
        meta += [kv(f"{arch}.expert_count", T_UINT32, E),
                 kv(f"{arch}.expert_used_count", T_UINT32, K),
                 kv(f"{arch}.expert_feed_forward_length", T_UINT32, I)]
    return meta


def widen_to_f32(raw, dtype):
    """16-bit values -> the same values as little-endian f32 bytes."""
    if dtype == "BF16":  # each value's two bytes become the high half of an f32
        out = bytearray(2 * len(raw))
        out[2::4], out[3::4] = raw[0::2], raw[1::2]
        return bytes(out)
    if dtype == "F16":
        return struct.pack(f"<{len(raw) // 2}f", *struct.unpack(f"<{len(raw) // 2}e", raw))
    return raw


class GgufTensor:
    """One tensor of the GGUF: its name, ggml dims (fastest-varying first), ggml type, byte length,
    and chunks(): a callable yielding its bytes in order (already in the ggml type)."""

    def __init__(self, name, dims, gtype, nbytes, chunks):
        self.name, self.dims, self.gtype, self.nbytes, self.chunks = name, dims, gtype, nbytes, chunks


def write_gguf(out_path, meta, tensors):
    """Writes the GGUF (version 3): header, metadata, tensor infos sorted by name, data aligned to ALIGN.
    Writes OUT.tmp and renames it when complete."""
    tensors = sorted(tensors, key=lambda t: t.name)
    infos = b""
    offset = 0
    data_offsets = []
    for t in tensors:
        infos += gguf_str(t.name) + struct.pack("<I", len(t.dims))
        infos += b"".join(struct.pack("<Q", d) for d in t.dims)
        infos += struct.pack("<IQ", t.gtype, offset)
        data_offsets.append(offset)
        offset = (offset + t.nbytes + ALIGN - 1) // ALIGN * ALIGN
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta)) + b"".join(meta) + infos
    head += b"\0" * ((-len(head)) % ALIGN)
    tmp = out_path + ".tmp"
    with open(tmp, "wb") as out:
        out.write(head)
        for t, doff in zip(tensors, data_offsets):
            out.write(b"\0" * (len(head) + doff - out.tell()))
            written = 0
            for chunk in t.chunks():
                out.write(chunk)
                written += len(chunk)
            if written != t.nbytes:
                sys.exit(f"write_gguf: {t.name}: {written} bytes written, {t.nbytes} expected")
    os.replace(tmp, out_path)
    return len(tensors)


def file_reader(path):
    """read(offset, length) -> bytes of the file at path (one handle kept open)."""
    f = open(path, "rb")

    def read(offset, length):
        f.seek(offset)
        out = f.read(length)
        if len(out) != length:
            sys.exit(f"hf_to_gguf.py: {path} ends at {offset + len(out)}, inside a tensor")
        return out
    return read


def pieces_chunks(read, pieces, widen=None):
    """chunks() over (offset, length) pieces read in order (each widened to f32 from `widen`)."""
    def chunks():
        for off, length in pieces:
            while length:
                n = min(length, 1 << 24)
                raw = read(off, n)
                yield widen_to_f32(raw, widen) if widen else raw
                off, length = off + n, length - n
    return chunks


EXPERT_FUSED = re.compile(r"model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)$")
EXPERT_ONE = re.compile(r"model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


def plan_tensors(cfg, header, base, read):
    """The GGUF tensors of a safetensors checkpoint (header: its JSON header; base: the data section's
    file offset)."""
    arch = ARCHS[cfg["model_type"]]
    tensors, per_expert = [], {}  # per_expert[(layer, proj)][e] = (offset, length, shape, dtype)
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt, shape = info["dtype"], info["shape"]
        if dt not in GGML_TYPES:
            sys.exit(f"hf_to_gguf.py: {name} has dtype {dt}")
        begin, end = info["data_offsets"]
        off, nbytes = base + begin, end - begin
        fused, one = EXPERT_FUSED.match(name), EXPERT_ONE.match(name)
        if (fused or one) and arch != "qwen3moe":
            sys.exit(f"hf_to_gguf.py: unexpected tensor {name}")
        if one:
            per_expert.setdefault((int(one.group(1)), one.group(3)), {})[int(one.group(2))] = (off, nbytes, shape, dt)
            continue
        if fused:
            layer, which = fused.group(1), fused.group(2)
            E, _, I = moe_dims(cfg)
            C = cfg["hidden_size"]
            want = [E, 2 * I, C] if which == "gate_up_proj" else [E, C, I]
            if shape != want:
                sys.exit(f"hf_to_gguf.py: {name} is {shape}, not {want} (the transposed fused layout "
                         "[E, C, 2I] / [E, I, C] is not read)")
            es = DTYPE_BYTES[dt]
            if which == "down_proj":
                tensors.append(GgufTensor(f"blk.{layer}.ffn_down_exps.weight", [I, C, E], GGML_TYPES[dt], nbytes,
                                          pieces_chunks(read, [(off, nbytes)])))
                continue
            half = I * C * es  # one expert's gate rows [0, I), then its up rows [I, 2I)
            for h, g in ((0, "ffn_gate_exps"), (1, "ffn_up_exps")):
                pieces = [(off + e * 2 * half + h * half, half) for e in range(E)]
                tensors.append(GgufTensor(f"blk.{layer}.{g}.weight", [C, I, E], GGML_TYPES[dt], E * half,
                                          pieces_chunks(read, pieces)))
            continue
        gname = hf_to_gguf_name(name)
        if gname is None:
            sys.exit(f"hf_to_gguf.py: unexpected tensor {name}")
        # 1-D tensors and the router widened to F32, as llama.cpp's converter stores them.
        widen = (len(shape) == 1 or gname.endswith("ffn_gate_inp.weight")) and dt != "F32"
        if arch == "qwen3moe" and re.match(r"blk\.\d+\.ffn_(gate|up|down)\.weight$", gname):
            sys.exit(f"hf_to_gguf.py: {name}: a dense layer in a MoE checkpoint (llama.cpp's qwen3moe has none)")
        tensors.append(GgufTensor(gname, list(reversed(shape)), GGML_TYPES["F32" if widen else dt],
                                  nbytes * 2 if widen else nbytes,
                                  pieces_chunks(read, [(off, nbytes)], dt if widen else None)))
    for (layer, proj), experts in sorted(per_expert.items()):
        E, _, I = moe_dims(cfg)
        if sorted(experts) != list(range(E)):
            sys.exit(f"hf_to_gguf.py: layer {layer} {proj}: experts {sorted(experts)}, not 0..{E - 1}")
        shapes = {tuple(v[2]) for v in experts.values()}
        dts = {v[3] for v in experts.values()}
        if len(shapes) != 1 or len(dts) != 1:
            sys.exit(f"hf_to_gguf.py: layer {layer} {proj}: experts of different shapes or dtypes")
        rows, cols = shapes.pop()
        g = {"gate_proj": "ffn_gate_exps", "up_proj": "ffn_up_exps", "down_proj": "ffn_down_exps"}[proj]
        pieces = [(experts[e][0], experts[e][1]) for e in range(E)]
        tensors.append(GgufTensor(f"blk.{layer}.{g}.weight", [cols, rows, E], GGML_TYPES[dts.pop()],
                                  sum(p[1] for p in pieces), pieces_chunks(read, pieces)))
    return tensors


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: hf_to_gguf.py MODEL_DIR OUT.gguf")
    model_dir, out_path = sys.argv[1], sys.argv[2]
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") not in ARCHS:
        sys.exit(f"hf_to_gguf.py: only qwen2, qwen3 and qwen3_moe checkpoints (got {cfg.get('model_type')})")
    if cfg["model_type"] == "qwen3_moe":
        check_moe_config(cfg)
    st_path = os.path.join(model_dir, "model.safetensors")
    with open(st_path, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(hlen))
    tensors = plan_tensors(cfg, header, 8 + hlen, file_reader(st_path))
    n = write_gguf(out_path, gguf_metadata(cfg, os.path.basename(os.path.normpath(model_dir))), tensors)
    print(f"wrote {out_path}: {n} tensors, {os.path.getsize(out_path) / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()

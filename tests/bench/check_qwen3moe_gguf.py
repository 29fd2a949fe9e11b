#!/usr/bin/env python3
"""CPU checks of issue 41's llama.cpp side (standard library only; ctest: bench_qwen3moe_gguf):
 - bench/hf_to_gguf.py on a Qwen3-MoE checkpoint (bench/cuda/make_qwen3moe_random.py --preset tiny
   --backend python): llama.cpp's qwen3moe keys (expert_count, expert_used_count,
   expert_feed_forward_length, key_length...) and tensors (ffn_gate_inp F32 {C, E}; ffn_gate_exps /
   ffn_up_exps {C, I, E}, ffn_down_exps {I, C, E} in bf16), each expert's values where they belong
   (gate = gate_up_proj[e, :I], up = gate_up_proj[e, I:], down = down_proj[e]; router and norms the
   same values in F32);
 - the same weights stored per expert convert to the same bytes;
 - the generator's GGUF (--format gguf) equals the conversion of its safetensors byte for byte, and a
   unit's values depend on (seed, name) alone (fewer layers: the same first layer; another seed: other);
 - refusals: norm_topk_prob false, dense layers, the transposed fused layout;
 - a dense Qwen3 fixture still converts as qwen3 (no expert keys);
 - bench/cuda/moe_rows.sh's dry run (MOE_ROWS_DRY_RUN=1) ends with the two digests equal, and (where
   VLM_BIN_DIR, default build/bin, has vlm-generate) our CPU decoder generates from the tiny checkpoint.
Prints 'N passed, N failed'; exits 1 on any failure."""
import json
import os
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GEN = os.path.join(ROOT, "bench", "cuda", "make_qwen3moe_random.py")
CONV = os.path.join(ROOT, "bench", "hf_to_gguf.py")
results = []


def check(what, ok, detail=""):
    results.append(bool(ok))
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else f": {detail}"), flush=True)


def run(*args, env=None):
    return subprocess.run([sys.executable, *args] if args[0].endswith(".py") else list(args), capture_output=True,
                          text=True, env=env)


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    return header, data


def tensor_bytes(header, data, name):
    b, e = header[name]["data_offsets"]
    return data[b:e]


def write_safetensors(path, tensors):  # tensors: name -> (shape, dtype, bytes)
    header, off = {}, 0
    for name in sorted(tensors):
        shape, dt, raw = tensors[name]
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    hb = json.dumps(header).encode()
    hb += b" " * ((-len(hb)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb)
        for name in sorted(tensors):
            f.write(tensors[name][2])


def read_gguf(path):
    """(metadata {key: value}, tensors {name: (dims, ggml type, bytes)})."""
    with open(path, "rb") as f:
        buf = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string():
        nonlocal pos
        n = take("Q")
        s = buf[pos:pos + n].decode()
        pos += n
        return s
    assert buf[:4] == b"GGUF"
    pos = 4
    version, nt, nkv = take("I"), take("Q"), take("Q")
    assert version == 3
    meta = {}
    for _ in range(nkv):
        key, vt = string(), take("I")
        meta[key] = {4: lambda: take("I"), 6: lambda: take("f"), 7: lambda: bool(take("B")), 8: string}[vt]()
    infos = []
    for _ in range(nt):
        name, nd = string(), take("I")
        dims = [take("Q") for _ in range(nd)]
        infos.append((name, dims, take("I"), take("Q")))
    align = meta.get("general.alignment", 32)
    base = (pos + align - 1) // align * align
    sizes = {0: 4, 1: 2, 30: 2}
    tensors = {}
    for name, dims, t, off in infos:
        n = sizes[t]
        for d in dims:
            n *= d
        tensors[name] = (dims, t, buf[base + off:base + off + n])
    return meta, tensors


def widen(raw):
    return b"".join(b"\0\0" + raw[i:i + 2] for i in range(0, len(raw), 2))


def main():
    tmp = tempfile.mkdtemp(prefix="check_qwen3moe_gguf.")
    m = os.path.join(tmp, "m")
    r = run(GEN, "--out", m, "--format", "safetensors", "--preset", "tiny", "--backend", "python")
    check("generator writes the safetensors", r.returncode == 0, r.stderr)
    r = run(GEN, "--out", m + ".gguf", "--format", "gguf", "--preset", "tiny", "--backend", "python")
    check("generator writes the GGUF", r.returncode == 0, r.stderr)
    conv = os.path.join(tmp, "conv.gguf")
    r = run(CONV, m, conv)
    check("hf_to_gguf.py converts the qwen3_moe checkpoint", r.returncode == 0, r.stderr)
    check("generator's GGUF == hf_to_gguf.py's conversion, byte for byte",
          open(m + ".gguf", "rb").read() == open(conv, "rb").read())
    cfg = json.load(open(os.path.join(m, "config.json")))
    C, E, K, I = cfg["hidden_size"], cfg["num_experts"], cfg["num_experts_per_tok"], cfg["moe_intermediate_size"]
    L, V, D = cfg["num_hidden_layers"], cfg["vocab_size"], cfg["head_dim"]
    meta, ts = read_gguf(conv)
    want_meta = {"general.architecture": "qwen3moe", "qwen3moe.expert_count": E, "qwen3moe.expert_used_count": K,
                 "qwen3moe.expert_feed_forward_length": I, "qwen3moe.feed_forward_length": cfg["intermediate_size"],
                 "qwen3moe.block_count": L, "qwen3moe.embedding_length": C, "qwen3moe.attention.key_length": D,
                 "qwen3moe.attention.value_length": D, "qwen3moe.attention.head_count_kv": 2, "qwen3moe.vocab_size": V}
    for k, v in want_meta.items():
        check(f"metadata {k} = {v}", meta.get(k) == v, meta.get(k))
    names = {"token_embd.weight", "output_norm.weight", "output.weight"}
    for l in range(L):
        names |= {f"blk.{l}.{n}.weight" for n in ("attn_norm", "ffn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                                  "attn_q_norm", "attn_k_norm", "ffn_gate_inp", "ffn_gate_exps",
                                                  "ffn_up_exps", "ffn_down_exps")}
    check("tensor names are llama.cpp's qwen3moe set", set(ts) == names, sorted(set(ts) ^ names))
    header, data = read_safetensors(os.path.join(m, "model.safetensors"))
    for l in range(L):
        p = f"model.layers.{l}.mlp."
        gu, dn = tensor_bytes(header, data, p + "experts.gate_up_proj"), tensor_bytes(header, data, p + "experts.down_proj")
        check(f"layer {l}: safetensors experts fused [E, 2I, C] / [E, C, I]",
              header[p + "experts.gate_up_proj"]["shape"] == [E, 2 * I, C] and
              header[p + "experts.down_proj"]["shape"] == [E, C, I])
        g, u, d = (ts[f"blk.{l}.ffn_{x}_exps.weight"] for x in ("gate", "up", "down"))
        check(f"layer {l}: ffn_gate/up_exps {{C, I, E}}, ffn_down_exps {{I, C, E}}, bf16",
              g[:2] == ([C, I, E], 30) and u[:2] == ([C, I, E], 30) and d[:2] == ([I, C, E], 30), (g[:2], u[:2], d[:2]))
        half = I * C * 2
        check(f"layer {l}: gate = gate_up[e, :I], up = gate_up[e, I:] for every expert",
              all(g[2][e * half:(e + 1) * half] == gu[2 * e * half:(2 * e + 1) * half] and
                  u[2][e * half:(e + 1) * half] == gu[(2 * e + 1) * half:(2 * e + 2) * half] for e in range(E)))
        check(f"layer {l}: down_exps = down_proj", d[2] == dn)
        router = ts[f"blk.{l}.ffn_gate_inp.weight"]
        check(f"layer {l}: router F32 {{C, E}} with the checkpoint's values",
              router[:2] == ([C, E], 0) and router[2] == widen(tensor_bytes(header, data, p + "gate.weight")))
        qn = ts[f"blk.{l}.attn_q_norm.weight"]
        check(f"layer {l}: q norm F32 of ones", qn[:2] == ([D], 0) and qn[2] == struct.pack("<f", 1.0) * D)
    check("token_embd {C, V} bf16 = embed_tokens", ts["token_embd.weight"][:2] == ([C, V], 30) and
          ts["token_embd.weight"][2] == tensor_bytes(header, data, "model.embed_tokens.weight"))

    # The same weights per expert (the released checkpoints' layout): the same GGUF.
    pe = os.path.join(tmp, "m_per_expert")
    os.makedirs(pe)
    json.dump(cfg, open(os.path.join(pe, "config.json"), "w"))
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        raw = tensor_bytes(header, data, name)
        if name.endswith("experts.gate_up_proj"):
            base = name[:-len("gate_up_proj")]
            for e in range(E):
                tensors[f"{base}{e}.gate_proj.weight"] = ([I, C], "BF16", raw[2 * e * half:(2 * e + 1) * half])
                tensors[f"{base}{e}.up_proj.weight"] = ([I, C], "BF16", raw[(2 * e + 1) * half:(2 * e + 2) * half])
        elif name.endswith("experts.down_proj"):
            base = name[:-len("down_proj")]
            for e in range(E):
                tensors[f"{base}{e}.down_proj.weight"] = ([C, I], "BF16", raw[e * half:(e + 1) * half])
        else:
            tensors[name] = (info["shape"], info["dtype"], raw)
    write_safetensors(os.path.join(pe, "model.safetensors"), tensors)
    r = run(CONV, pe, os.path.join(tmp, "pe.gguf"))
    check("per-expert layout converts", r.returncode == 0, r.stderr)
    _, ts_pe = read_gguf(os.path.join(tmp, "pe.gguf"))
    check("per-expert layout: the same tensors, bytes and shapes", ts_pe == ts)

    # Seeding by (seed, name): one layer only keeps layer 0's bytes; another seed changes them.
    for extra, same in ((["--layers", "1"], True), (["--seed", "1"], False)):
        o = os.path.join(tmp, "o" + extra[0][2:])
        r = run(GEN, "--out", o, "--format", "safetensors", "--preset", "tiny", "--backend", "python", *extra)
        h2, d2 = read_safetensors(os.path.join(o, "model.safetensors"))
        n = "model.layers.0.mlp.experts.gate_up_proj"
        eq = tensor_bytes(h2, d2, n) == tensor_bytes(header, data, n) and \
            tensor_bytes(h2, d2, "model.embed_tokens.weight") == tensor_bytes(header, data, "model.embed_tokens.weight")
        check(f"{' '.join(extra)}: layer 0 experts and the embedding {'the same' if same else 'differ'}", eq == same)

    # Refusals, naming what llama.cpp's qwen3moe does not compute.
    for what, edit, needle in (("norm_topk_prob false", {"norm_topk_prob": False}, "norm_topk_prob"),
                               ("a dense layer", {"mlp_only_layers": [1]}, "dense layers")):
        bad = os.path.join(tmp, "bad_" + needle.split()[0])
        os.makedirs(bad)
        os.symlink(os.path.join(m, "model.safetensors"), os.path.join(bad, "model.safetensors"))
        json.dump(dict(cfg, **edit), open(os.path.join(bad, "config.json"), "w"))
        r = run(CONV, bad, os.path.join(tmp, "bad.gguf"))
        check(f"refuses {what}", r.returncode != 0 and needle in r.stderr, r.stderr)
    tr = os.path.join(tmp, "transposed")
    os.makedirs(tr)
    json.dump(cfg, open(os.path.join(tr, "config.json"), "w"))
    t2 = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        shape = info["shape"]
        if name.endswith("gate_up_proj"):
            shape = [E, C, 2 * I]  # the released Qwen3-VL-MoE layout (bytes irrelevant here)
        t2[name] = (shape, info["dtype"], tensor_bytes(header, data, name))
    write_safetensors(os.path.join(tr, "model.safetensors"), t2)
    r = run(CONV, tr, os.path.join(tmp, "tr.gguf"))
    check("refuses the transposed fused layout", r.returncode != 0 and "transposed" in r.stderr, r.stderr)

    # A dense Qwen3 fixture: qwen3, no expert keys or tensors.
    dense = os.path.join(ROOT, "tests", "fixtures", "models", "qwen3_tiny")
    r = run(CONV, dense, os.path.join(tmp, "dense.gguf"))
    check("dense qwen3 fixture converts", r.returncode == 0, r.stderr)
    if r.returncode == 0:
        dm, dts = read_gguf(os.path.join(tmp, "dense.gguf"))
        check("dense qwen3: arch qwen3, no expert keys or tensors", dm["general.architecture"] == "qwen3" and
              not any("expert" in k for k in dm) and not any("exps" in n or "gate_inp" in n for n in dts))

    # moe_rows.sh's dry run.
    bin_dir = os.environ.get("VLM_BIN_DIR", os.path.join(ROOT, "build", "bin"))
    env = dict(os.environ, MOE_ROWS_DRY_RUN="1", MOE_ROWS_WORK=os.path.join(tmp, "rows_work"), BIN=bin_dir)
    r = run("bash", os.path.join(ROOT, "bench", "cuda", "moe_rows.sh"), os.path.join(tmp, "rows_out"), env=env)
    check("moe_rows.sh dry run exits 0", r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:])
    check("moe_rows.sh dry run: same weights in both formats, GGUF == conversion",
          "same weights: the two runs' units digest" in r.stdout and "equals hf_to_gguf.py's conversion" in r.stdout,
          r.stdout[-2000:])
    check("moe_rows.sh dry run: every phase reported", all(f"== {p}" in r.stdout for p in (
        "0. read rate", "1. safetensors", "2. ours", "3. transformers", "4. gguf", "5a. llama-bench",
        "5b. llama-batched-bench")), r.stdout[-2000:])
    if os.access(os.path.join(bin_dir, "vlm-generate"), os.X_OK):
        check("moe_rows.sh dry run: vlm-generate reads the generator's checkpoint",
              "dry run, ours on the CPU: generated: " in r.stdout, r.stdout[-2000:])
    else:
        print(f"(no {bin_dir}/vlm-generate: our loader on the generator's checkpoint not checked)")
    check("moe_rows.sh dry run: nothing left in its work folder", os.listdir(os.path.join(tmp, "rows_work")) == [],
          os.listdir(os.path.join(tmp, "rows_work")))
    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    subprocess.run(["rm", "-rf", tmp])
    sys.exit(0 if passed == len(results) else 1)


if __name__ == "__main__":
    main()

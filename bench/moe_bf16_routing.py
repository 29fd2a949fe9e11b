#!/usr/bin/python3
"""Would computing the MoE routing weights and expert sums in bf16, as transformers does for a bf16 model,
tighten the GPU's bf16 rule on the Qwen3-MoE fixtures? (issue 41; a CPU measurement, nothing changed.)

A restatement of Qwen3MoeForCausalLM's forward (transformers 5.17 as read: RMSNorm in f32 then cast,
q/k norms, rotate_half RoPE with cos/sin cast to the activations' dtype, SDPA, the sparse block's
softmax router, top-k, renormalisation, experts in increasing index order added with index_add_) over a
fixture in tests/fixtures/models (reference.safetensors: HF f32 logits p<i>.logits for prompts p<i>.ids),
in float64 with the rounding points of a bf16 run switched on or off:
  f64           no rounding (checks the restatement: row error vs HF f32 ~1e-6);
  hf            every HF bf16 rounding: weights, each op's output, the router logits (a bf16 F.linear),
                the routing weights (.to(bf16)), each expert's weighted output and the running sum
                (index_add_ into a bf16 tensor);
  f32-moe       the same but the MoE part as our GPU does it: router logits, routing weights and the
                expert sum in f32, rounded to bf16 once at the block's output;
  router-bf16   f32-moe with only the router logits rounded (HF's top-k input);
  hf+noiseN     hf with every attention output perturbed by one bf16 ulp at random (seed N = 1..4; another
                kernel's rounding: what any other bf16 implementation differs by before the router).
Per prompt: each mode's max row relative L2 error vs HF f32 (the rule's measure), the (token, layer)
routing decisions that differ from hf's, and the rows whose argmax differs from hf's.
Needs numpy (Debian: python3-numpy). Usage: /usr/bin/python3 bench/moe_bf16_routing.py [MODEL ...]"""
import json
import os
import struct
import sys

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def bf(x):
    """Round to bf16 (nearest even), back in float64."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def load(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        h = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        raw = data[b:e]
        if v["dtype"] == "BF16":
            a = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif v["dtype"] == "F32":
            a = np.frombuffer(raw, np.float32)
        elif v["dtype"] == "I32":
            a = np.frombuffer(raw, np.int32)
        else:
            raise ValueError(v["dtype"])
        out[k] = a.reshape(v["shape"]).astype(np.float64 if v["dtype"] != "I32" else np.int64)
    return out


class Model:
    def __init__(self, d, mode, rng=None):
        self.c = json.load(open(os.path.join(d, "config.json")))
        self.w = load(os.path.join(d, "model.safetensors"))
        self.mode, self.rng = mode, rng
        self.noisy = mode.startswith("hf+noise")
        self.r = (lambda x: x) if mode == "f64" else bf
        if mode != "f64":
            self.w = {k: bf(v) for k, v in self.w.items()}
        self.routes = []  # per layer of a forward: [T, K] chosen experts

    def lin(self, x, name):
        return self.r(x @ self.w[name].T)

    def norm(self, x, wname):
        c = self.c
        h = x / np.sqrt((x * x).mean(-1, keepdims=True) + c["rms_norm_eps"])
        return self.r(self.w[wname] * self.r(h))

    def rope(self, x, T, D):
        theta = self.c.get("rope_theta", self.c.get("rope_parameters", {}).get("rope_theta", 1e6))
        inv = (1.0 / np.power(np.float32(theta), np.arange(0, D, 2, dtype=np.float32) / np.float32(D))).astype(np.float32)
        ang = (np.arange(T, dtype=np.float32)[:, None] * inv[None, :]).astype(np.float32)
        emb = np.concatenate([ang, ang], -1)
        cos, sin = self.r(np.cos(emb).astype(np.float32)), self.r(np.sin(emb).astype(np.float32))
        rot = np.concatenate([-x[..., D // 2:], x[..., :D // 2]], -1)
        return self.r(self.r(x * cos[:, None, :]) + self.r(rot * sin[:, None, :]))

    def experts(self, l, e):
        p = f"model.layers.{l}.mlp.experts."
        if p + "gate_up_proj" in self.w:
            I = self.c["moe_intermediate_size"]
            gu = self.w[p + "gate_up_proj"][e]
            return gu[:I], gu[I:], self.w[p + "down_proj"][e]
        q = f"{p}{e}."
        return self.w[q + "gate_proj.weight"], self.w[q + "up_proj.weight"], self.w[q + "down_proj.weight"]

    def moe(self, l, h):
        c, r = self.c, self.r
        E, K = c.get("num_experts", c.get("num_local_experts")), c["num_experts_per_tok"]
        logits = h @ self.w[f"model.layers.{l}.mlp.gate.weight"].T
        if self.mode == "hf" or self.mode == "router-bf16" or self.noisy:
            logits = bf(logits)
        z = np.exp(logits - logits.max(-1, keepdims=True))
        prob = (z / z.sum(-1, keepdims=True)).astype(np.float32).astype(np.float64)  # softmax in f32
        top = np.argsort(-prob, axis=-1, kind="stable")[:, :K]
        self.routes.append(np.sort(top, -1))
        wt = np.take_along_axis(prob, top, -1)
        if c.get("norm_topk_prob", False):
            wt = wt / wt.sum(-1, keepdims=True)
        hf_sum = self.mode == "hf" or self.noisy
        if hf_sum:
            wt = bf(wt)
        y = np.zeros_like(h)
        for e in range(E):
            rows, pos = np.nonzero(top == e)
            if rows.size == 0:
                continue
            g, u, dn = self.experts(l, e)
            x = h[rows]
            a = r(r(r(x @ g.T) / (1 + np.exp(-r(x @ g.T)))) * r(x @ u.T))
            o = r(a @ dn.T) * wt[rows, pos][:, None]
            if hf_sum:
                y[rows] = bf(y[rows] + bf(o))
            else:
                y[rows] += o
        return y if hf_sum else r(y)

    def forward(self, ids):
        c, r, w = self.c, self.r, self.w
        T, C, H, Hkv = len(ids), c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
        D = c.get("head_dim", C // H)
        self.routes = []
        x = w["model.embed_tokens.weight"][ids]
        mlp_only = set(c.get("mlp_only_layers", []))
        for l in range(c["num_hidden_layers"]):
            p = f"model.layers.{l}."
            h = self.norm(x, p + "input_layernorm.weight")
            q = self.lin(h, p + "self_attn.q_proj.weight").reshape(T, H, D)
            k = self.lin(h, p + "self_attn.k_proj.weight").reshape(T, Hkv, D)
            v = self.lin(h, p + "self_attn.v_proj.weight").reshape(T, Hkv, D)
            q = self.rope(self.norm(q, p + "self_attn.q_norm.weight"), T, D)
            k = self.rope(self.norm(k, p + "self_attn.k_norm.weight"), T, D)
            G = H // Hkv
            kk, vv = np.repeat(k, G, 1), np.repeat(v, G, 1)
            s = np.einsum("thd,shd->hts", q, kk) / np.sqrt(D)
            s = s + np.triu(np.full((T, T), -np.inf), 1)[None]
            pr = np.exp(s - s.max(-1, keepdims=True))
            pr /= pr.sum(-1, keepdims=True)
            att = r(np.einsum("hts,shd->thd", pr, vv).reshape(T, H * D))
            if self.noisy:  # one ulp of bf16 at random: another kernel's rounding
                ulp = np.abs(att) * 2.0 ** -8
                att = bf(att + ulp * self.rng.choice([-1.0, 0.0, 1.0], size=att.shape))
            x = r(x + self.lin(att, p + "self_attn.o_proj.weight"))
            h = self.norm(x, p + "post_attention_layernorm.weight")
            sparse = l not in mlp_only and (l + 1) % c.get("decoder_sparse_step", 1) == 0
            if sparse:
                y = self.moe(l, h)
            else:
                g = self.lin(h, p + "mlp.gate_proj.weight")
                y = self.lin(r(r(g / (1 + np.exp(-g))) * self.lin(h, p + "mlp.up_proj.weight")), p + "mlp.down_proj.weight")
            x = r(x + y)
        h = self.norm(x, "model.norm.weight")
        head = w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"]
        return r(h @ head.T), np.stack(self.routes, 0) if self.routes else None


def row_err(a, b):
    return float((np.linalg.norm(a - b, axis=-1) / np.linalg.norm(b, axis=-1)).max())


def main():
    names = sys.argv[1:] or ["qwen3_moe_tiny", "qwen3_moe_f32"]
    modes = ["f64", "hf", "f32-moe", "router-bf16"] + [f"hf+noise{k}" for k in range(1, 5)]
    for name in names:
        d = os.path.join(ROOT, "tests", "fixtures", "models", name)
        ref = load(os.path.join(d, "reference.safetensors"))
        models = {m: Model(d, m, np.random.default_rng(int(m[-1]) if m[-1].isdigit() else 0)) for m in modes}
        print(f"== {name}: max row relative L2 error vs HF f32 per prompt; routing decisions (token x MoE layer) "
              f"and row argmaxes differing from mode hf")
        for i in range(8):
            if f"p{i}.ids" not in ref:
                continue
            ids, want = ref[f"p{i}.ids"], ref[f"p{i}.logits"]
            out = {m: models[m].forward(ids) for m in modes}
            hl, hr = out["hf"]
            cells = []
            for m in modes:
                lg, rt = out[m]
                route = int((rt != hr).any(-1).sum())
                arg = int((lg.argmax(-1) != hl.argmax(-1)).sum())
                cells.append(f"{m} {row_err(lg, want):.4g}" + ("" if m == "hf" else f" ({route}/{hr.shape[0] * hr.shape[1]} "
                                                                                   f"routes, {arg}/{len(ids)} argmax)"))
            print(f"p{i} ({len(ids)} tokens): " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    main()

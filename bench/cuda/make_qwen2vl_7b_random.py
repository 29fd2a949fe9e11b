"""A random-weight Qwen2-VL-7B-shaped checkpoint for the served mixed-load bench
(bench/cuda/served_mixed_load.sh), made on the GPU machine in bf16 with transformers:
Qwen2-VL-7B-Instruct's shapes (decoder 28 layers x 3584, 28 heads, 4 KV heads, MLP 18944,
vocabulary 152064, M-RoPE sections 16/24/24; vision tower depth 32 x 1280, 16 heads, merger to
3584), transformers' own initialisation (N(0, 0.02), seed 0). Chat template and image / video
processors from the test fixture tests/fixtures/qwen2vl_server/qwen2_vl_chat with their pixel
caps raised to Qwen2-VL's released 12,845,056 (a 448x448 image keeps its size: 256 tokens),
the tokenizer from TOKENIZER_DIR (Qwen3's: the same special-token ids).
    python3 bench/cuda/make_qwen2vl_7b_random.py TOKENIZER_DIR OUT_DIR"""
import json
import os
import shutil
import sys
import time

import torch
from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "qwen2vl_server", "qwen2_vl_chat")


def main():
    tok_dir, out = sys.argv[1], sys.argv[2]
    t0 = time.time()
    os.makedirs(out, exist_ok=True)
    cfg = json.load(open(os.path.join(FIXTURE, "config.json")))
    tc = cfg["text_config"]
    tc.update(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
              num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False, max_window_layers=28,
              layer_types=["full_attention"] * 28)
    tc["rope_parameters"]["mrope_section"] = [16, 24, 24]
    cfg["tie_word_embeddings"] = False
    cfg["vision_config"].update(depth=32, embed_dim=1280, hidden_size=3584, num_heads=16, mlp_ratio=4)
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)
    config = Qwen2VLConfig.from_pretrained(out)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = Qwen2VLForConditionalGeneration(config).eval()
    n = sum(p.numel() for p in model.parameters())
    model.save_pretrained(out, max_shard_size="100GB")
    del model
    torch.cuda.empty_cache()
    shutil.copy(os.path.join(FIXTURE, "chat_template.jinja"), out)
    for f in ("preprocessor_config.json", "video_preprocessor_config.json"):
        pre = json.load(open(os.path.join(FIXTURE, f)))
        pre["size"]["longest_edge"] = 12845056
        json.dump(pre, open(os.path.join(out, f), "w"), indent=2)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, f), out)
    print(f"wrote {out}: Qwen2-VL-7B shapes, {n / 1e9:.2f} B parameters, {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()

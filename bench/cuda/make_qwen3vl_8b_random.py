"""A random-weight Qwen3-VL-8B-shaped checkpoint for the served long-video bench
(bench/cuda/long_video_ttft.sh with FAMILY=qwen3vl), made on the GPU machine in bf16 with transformers:
Qwen3-VL-8B-Instruct's shapes (decoder 36 layers x 4096, 32 heads, 8 KV heads, head size 128,
MLP 12288, vocabulary 151936, interleaved M-RoPE sections 24/20/20, theta 5e6; vision tower depth 27 x
1152, 16 heads, MLP 4304, 2304 learned positions, DeepStack after blocks 8/16/24, merger to 4096),
transformers' own initialisation (seed 0). Chat template and processor settings from the test fixture
tests/fixtures/qwen3vl/processor, with the video budget raised so that a 400 s 448x448 clip sampled at
2.5 fps keeps its frame size (1,000 frames: 500 temporal groups x 196 tokens = 98,000 video tokens);
the tokenizer from TOKENIZER_DIR (Qwen3's: the same special-token ids as the released checkpoint).
    python3 bench/cuda/make_qwen3vl_8b_random.py TOKENIZER_DIR OUT_DIR"""
import json
import os
import shutil
import sys
import time

import torch
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "qwen3vl")


def main():
    tok_dir, out = sys.argv[1], sys.argv[2]
    t0 = time.time()
    os.makedirs(out, exist_ok=True)
    cfg = json.load(open(os.path.join(FIXTURE, "qwen3_vl_tiny", "config.json")))
    cfg.update(image_token_id=151655, video_token_id=151656, vision_start_token_id=151652,
               vision_end_token_id=151653, tie_word_embeddings=False)
    tc = cfg["text_config"]
    tc.update(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
              num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=262144,
              bos_token_id=151643, eos_token_id=151645, tie_word_embeddings=False)
    tc["rope_parameters"].update(mrope_section=[24, 20, 20], rope_theta=5000000.0, mrope_interleaved=True)
    cfg["vision_config"].update(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16,
                                num_position_embeddings=2304, out_hidden_size=4096,
                                deepstack_visual_indexes=[8, 16, 24])
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)
    config = Qwen3VLConfig.from_pretrained(out)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = Qwen3VLForConditionalGeneration(config).eval()
    n = sum(p.numel() for p in model.parameters())
    model.save_pretrained(out, max_shard_size="100GB")
    del model
    torch.cuda.empty_cache()
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)  # save_pretrained's own is equivalent
    proc_dir = os.path.join(FIXTURE, "processor")
    shutil.copy(os.path.join(proc_dir, "chat_template.jinja"), out)
    proc = json.load(open(os.path.join(proc_dir, "processor_config.json")))
    proc["image_processor"]["size"] = {"longest_edge": 16777216, "shortest_edge": 65536}  # released values
    proc["video_processor"]["size"] = {"longest_edge": 1000 * 448 * 448 + 1, "shortest_edge": 4096}
    proc["video_processor"]["max_frames"] = 1000
    json.dump(proc, open(os.path.join(out, "processor_config.json"), "w"), indent=2)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, f), out)
    print(f"wrote {out}: Qwen3-VL-8B shapes, {n / 1e9:.2f} B parameters, {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# Session 20 (branch moe-t1), issue 41's one-sequence MoE decode: the gate|up through a ring of
# bulk-copied stages (kernels/cuda/moe/moe_decode.h 2b., VLM_MOE_GATE_UP_RING) and the staged
# down+combine filled by bulk copies (3b., VLM_MOE_DOWN_BULK), both on by default and both the same
# bits as the forms they replace (2. and 3'.), on one GPU in one call:
#  1. the MoE kernel and layer tests with the defaults, and the layer tests with both switched off;
#  2. bench_cuda_moe at T = 1 (kernel rows "gate_up form=pair|ring", "down_combine form=staged|bulk",
#     layer rows "decode graph form=norm_fused" (both off) vs "form=norm_bulk" (both on));
#  3. the Qwen3-30B-A3B-shaped step (dummy weights), on / off alternated, each with --dump-logits:
#     the logits of on and off must be equal byte for byte (cmp), since the sums are the same;
#     and `fused` (VLM_MOE_PAIR_FUSED=1: 2f., gate|up + down+combine in one cooperative launch).
# A win: "kernel gate_up form=ring" below "form=pair" (session 19: 16.3 us), "kernel down_combine
# form=bulk" below "form=staged" (12.4 us), "kernel pair_fused form=coop" below the two summed, and
# "decode batch 1" ms of `on` (and `fused`) below `off` (3.355 ms).
# Batch 64 does not take these forms (T = 1 only): its row should not move.
# Usage, from a build tree's bin/ folder: bench/cuda/moe_ring_ab.sh BIN OUTDIR
set -uo pipefail
BIN=$(cd "${1:?BIN folder (test_cuda, bench_cuda_moe, bench_cuda_decoder)}" && pwd) || exit 2
mkdir -p "${2:?OUTDIR}" || exit 2
OUT=$(cd "$2" && pwd) || exit 2
cd "$(dirname "$0")/../.." || exit 2
F='CudaMoeDecode.*:CudaMoeNormRouter.*:CudaMoe.*:CudaMoeGemv.*:*CudaMoeLayer*'
timeout 300 "$BIN/test_cuda" --gtest_filter="$F" 2>&1 | tail -40 | tee "$OUT/t_on.log"
VLM_MOE_GATE_UP_RING=0 VLM_MOE_DOWN_BULK=0 timeout 120 "$BIN/test_cuda" --gtest_filter='*CudaMoeLayer*' 2>&1 |
  tail -5 | tee "$OUT/t_off.log"
VLM_MOE_PAIR_FUSED=1 timeout 120 "$BIN/test_cuda" --gtest_filter='*CudaMoeLayer*' 2>&1 | tail -5 | tee "$OUT/t_fused.log"
timeout 300 "$BIN/bench_cuda_moe" --tokens 1 --peak 4430 2>&1 | tee "$OUT/bench_moe.txt" |
  grep -E "gate_up|down_combine|pair_fused|decode graph"
for form in on off fused on off fused; do
  echo "# $form" | tee -a "$OUT/decoder.txt"
  v=$([ "$form" = off ] && echo 0 || echo 1)
  f=$([ "$form" = fused ] && echo 1 || echo 0)
  VLM_MOE_GATE_UP_RING=$v VLM_MOE_DOWN_BULK=$v VLM_MOE_PAIR_FUSED=$f timeout 300 "$BIN/bench_cuda_decoder" \
    --model bench/cuda/configs/qwen3_30b_a3b --load-format dummy --dtype bfloat16 --batches 1,64 --context 1024 \
    --steps 64 --prefill 0 --reps 3 --dump-logits "$OUT/logits_$form.bin" 2>&1 | grep -E "^decode" |
    tee -a "$OUT/decoder.txt"
done
cmp "$OUT/logits_on.bin" "$OUT/logits_off.bin" && echo "logits on == off (bit for bit)" | tee -a "$OUT/decoder.txt"
cmp "$OUT/logits_fused.bin" "$OUT/logits_off.bin" && echo "logits fused == off (bit for bit)" | tee -a "$OUT/decoder.txt"

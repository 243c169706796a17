#!/usr/bin/env bash
# Regenerates crates/peakplan-core/tests/data/traced/tt_cpu.csv: torchtune 0.6.1 steps traced on CPU (tt_step.py),
# in the same columns as hf_cpu.csv. Needs torchtune 0.6.1 and torchao 0.9 beside torch.
source "$(dirname "$0")/lib.sh"
out="$data/tt_cpu.csv"
# ONLY=REGEX runs the matching cases and prints their rows instead of rewriting the file.
[[ -z ${ONLY:-} ]] && echo "$llama_header" >"$out"
run() { # id, harness flags, plan keys
  [[ -n ${ONLY:-} && ! $1 =~ $ONLY ]] && return 0
  for layers in 1 2 3; do
    total=$(total_of tt_step.py "$layers" 2 256 $2)
    row="$1-L$layers,$layers,512,1376,8,8,32000,0,$total,b=2&s=256&attn=sdpa&opt=adamw_torch&fw=torchtune&gpus=1&gc=0&prec=bf16&compile=0&$3"
    emit "$row"
  done
}
# Full fine-tuning with the chunked loss peaks at the optimizer step here; optimizer-in-backward (below) peaks in
# backward, where torchtune 0.5+'s fp32 norm products show.
run tt-full-chunked "--chunked" "method=full&loss=chunked"
run tt-lora-qv "--lora 16" "method=lora&r=16&targets=q,v&dropout=0&adtype=bf16&loss=standard"
run tt-lora-qv-mlp-chunked "--lora 16 --mlp --chunked" "method=lora&r=16&targets=q,v,gate,up,down&dropout=0&adtype=bf16&loss=chunked"
# Optimizer in backward (7B_full_low_memory's optimizer_in_bwd): each parameter steps as its gradient is made.
run tt-full-oib-chunked "--chunked --oib" "method=full&loss=chunked&oib=1"

# The coverage table follows the data.
if [[ -z ${ONLY:-} ]]; then "$here/coverage.sh"; fi

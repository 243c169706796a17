#!/usr/bin/env bash
# Regenerates crates/peakplan-core/tests/data/traced/tt_cpu.csv: torchtune 0.6.1 steps traced on CPU (tt_step.py),
# in the same columns as hf_cpu.csv. Needs torchtune 0.6.1 and torchao 0.9 beside torch.
source "$(dirname "$0")/lib.sh"
out="$data/tt_cpu.csv"
echo "$llama_header" >"$out"
run() { # id, harness flags, plan keys
  for layers in 1 2 3; do
    total=$(total_of tt_step.py "$layers" 2 256 $2)
    echo "$1-L$layers,$layers,512,1376,8,8,32000,0,$total,b=2&s=256&attn=sdpa&opt=adamw_torch&fw=torchtune&gpus=1&gc=0&prec=bf16&compile=0&$3" >>"$out"
  done
}
# Full fine-tuning with the chunked loss peaks at the optimizer step here, which torchtune's version does not change;
# eagerly, torchtune 0.5+ keeps each norm's fp32 product (see ARCHITECTURE.md), so the plain loss is left out.
run tt-full-chunked "--chunked" "method=full&loss=chunked"
run tt-lora-qv "--lora 16" "method=lora&r=16&targets=q,v&dropout=0&adtype=bf16&loss=standard"
run tt-lora-qv-mlp-chunked "--lora 16 --mlp --chunked" "method=lora&r=16&targets=q,v,gate,up,down&dropout=0&adtype=bf16&loss=chunked"

# The coverage table follows the data.
"$here/coverage.sh"

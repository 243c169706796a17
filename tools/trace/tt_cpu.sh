#!/usr/bin/env bash
# Regenerates crates/peakplan-core/tests/data/traced/tt_cpu.csv: torchtune 0.6.1 steps traced on CPU (tt_step.py),
# in the same columns as hf_cpu.csv. Needs torchtune 0.6.1 and torchao 0.9 beside torch.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/../../crates/peakplan-core/tests/data/traced/tt_cpu.csv"
py="${PYTHON:-python3}"
echo "id,layers,hidden,intermediate,heads,kv_heads,vocab,tied,traced_peak_allocated_bytes,query" >"$out"
run() { # id, harness flags, plan keys
  for layers in 1 2 3; do
    total=$("$py" "$here/tt_step.py" "$layers" 2 256 $2 2>/dev/null | tail -1 \
      | "$py" -c 'import json, sys; print(json.load(sys.stdin)["total"])')
    echo "$1-L$layers,$layers,512,1376,8,8,32000,0,$total,b=2&s=256&attn=sdpa&opt=adamw_torch&fw=torchtune&gpus=1&gc=0&prec=bf16&compile=0&$3" >>"$out"
  done
}
# Full fine-tuning with the chunked loss peaks at the optimizer step here, which torchtune's version does not change;
# eagerly, torchtune 0.5+ keeps each norm's fp32 product (see ARCHITECTURE.md), so the plain loss is left out.
run tt-full-chunked "--chunked" "method=full&loss=chunked"
run tt-lora-qv "--lora 16" "method=lora&r=16&targets=q,v&dropout=0&adtype=bf16&loss=standard"
run tt-lora-qv-mlp-chunked "--lora 16 --mlp --chunked" "method=lora&r=16&targets=q,v,gate,up,down&dropout=0&adtype=bf16&loss=chunked"

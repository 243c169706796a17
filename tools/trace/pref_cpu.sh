#!/usr/bin/env bash
# Regenerates crates/peakplan-core/tests/data/traced/pref_cpu.csv: preference steps through TRL's own trainers
# (pref_step.py), each case at two layer counts so that what a layer adds is pinned (core test
# `cpu_traces_of_preference_steps_match_the_engine`). Needs a Python with torch, transformers, peft, datasets and
# trl (pip install torch transformers peft datasets trl==1.16.0); about ten minutes on two cores. The TRL release
# is in each row's `source`: how TRL computes log-probabilities moved between releases (COVERAGE.md).
# ORPO, CPO and SimPO run in `trl.experimental` over the model's full logits, scored by a fused Triton log-softmax
# on CUDA: the harness runs that kernel's CUDA branch with its arithmetic in torch (trl_head.py).
source "$(dirname "$0")/lib.sh"
out="$data/pref_cpu.csv"
trl=$("$py" -c 'import trl; print(trl.__version__)')
[[ -z ${ONLY:-} ]] && echo "id,layers,hidden,intermediate,heads,kv_heads,vocab,tied,traced_peak_allocated_bytes,source,query" >"$out"
run() { # id, task, harness flags, plan keys
  [[ -n ${ONLY:-} && ! $1 =~ $ONLY ]] && return 0
  for layers in $LAYERS; do
    total=$(total_of pref_step.py "$2" "$layers" "$B" "$S" "$P" --hidden "$H" --inter "$I" --heads "$NH" --kv "$KV" \
      --vocab "$V" $3)
    emit "$1-L$layers,$layers,$H,$I,$NH,$KV,$V,0,$total,trl-$trl,b=$B&s=$S&prompt=$P&task=$2&loss=standard&opt=adamw_torch&fw=hf&gpus=1&attn=sdpa&prec=bf16&$4"
  done
}
H=512 I=1376 NH=8 KV=8 V=32000 B=2 S=256 P=128 LAYERS="1 2"
LORA="method=lora&r=16&targets=q,v&dropout=0&adtype=fp32"
ALL="method=lora&r=16&targets=all-linear&dropout=0&adtype=fp32"
ALLT="--targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
run dpo-lora-qv dpo "" "$LORA&gc=0"
run dpo-lora-qv-gc dpo "--gc" "$LORA&gc=1"
run dpo-lora-all dpo "$ALLT" "$ALL&gc=0"
run dpo-lora-all-gc dpo "$ALLT --gc" "$ALL&gc=1"
run dpo-lora-qv-pre dpo "--ref precomputed" "$LORA&gc=0&ref=precomputed"
run dpo-full dpo "--full" "method=full&gc=0"
run dpo-full-gc dpo "--full --gc" "method=full&gc=1"
run dpo-full-pre dpo "--full --ref precomputed" "method=full&gc=0&ref=precomputed"
run kto-lora-qv kto "" "$LORA&gc=0"
run kto-lora-all-gc kto "$ALLT --gc" "$ALL&gc=1"
run kto-full kto "--full" "method=full&gc=0"
# Longer prompts (fewer completion tokens to score), a wider batch.
S=384 P=320
run dpo-lora-qv-p320 dpo "" "$LORA&gc=0"
run kto-full-p320 kto "--full" "method=full&gc=0"
S=256 P=64 B=4
run dpo-lora-all-b4 dpo "$ALLT" "$ALL&gc=0"
# ORPO (`ORPOTrainer`), CPO (`CPOTrainer`, sigmoid loss, cpo_alpha 1: an NLL term over the chosen half) and SimPO
# (`CPOTrainer`, loss_type simpo, cpo_alpha 0: no NLL term): no reference, the full logits of the doubled batch.
S=256 P=128 B=2
run orpo-lora-qv orpo "" "$LORA&gc=0"
run orpo-lora-all-gc orpo "$ALLT --gc" "$ALL&gc=1"
run orpo-full orpo "--full" "method=full&gc=0"
run cpo-lora-qv cpo "" "$LORA&gc=0"
run cpo-full-gc cpo "--full --gc" "method=full&gc=1"
run simpo-lora-qv simpo "" "$LORA&gc=0"
run simpo-lora-all-gc simpo "$ALLT --gc" "$ALL&gc=1"
run simpo-full simpo "--full" "method=full&gc=0"
S=256 P=64 B=4
run orpo-lora-all-b4 orpo "$ALLT" "$ALL&gc=0"

# The coverage table follows the data (ONLY= leaves the data alone).
if [[ -z ${ONLY:-} ]]; then "$here/coverage.sh"; fi

#!/usr/bin/env bash
# Regenerates crates/peakplan-core/tests/data/traced/hf_keys.csv: the plan keys the first tables leave at one value
# (PEFT methods, trainable tokens and modules_to_save, adapter dtypes, dropout, accumulation, optimizers), each
# traced through transformers + PEFT (+ bitsandbytes for the 8-bit optimizer) at one and two layers, so what a
# layer adds is checked too. ONLY=REGEX runs the matching cases and prints their rows instead of writing the file.
source "$(dirname "$0")/lib.sh"
out="$data/hf_keys.csv"
[[ -z ${ONLY:-} ]] && echo "$llama_header" >"$out"
run() { # id, harness flags, plan keys
  [[ -n ${ONLY:-} && ! $1 =~ $ONLY ]] && return 0
  for layers in $LAYERS; do
    total=$(total_of hf_step.py "$layers" "$B" "$S" --hidden "$H" --inter "$I" --heads "$NH" --kv "$KV" --vocab "$V" $2)
    row="$1-L$layers,$layers,$H,$I,$NH,$KV,$V,0,$total,b=$B&s=$S&loss=standard&fw=hf&gpus=1&attn=sdpa&gc=0&$3"
    if [[ -n ${ONLY:-} ]]; then echo "$row"; else echo "$row" >>"$out"; fi
  done
}
H=512 I=1376 NH=8 KV=8 V=32000 B=2 S=256 LAYERS="1 2"
QV="--targets q_proj,v_proj"
ALL="--targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
L="opt=adamw_torch&dropout=0&adtype=fp32&prec=bf16&r=16"
# PEFT's methods (peft 0.21.2), over the query and value projections unless the method adapts other modules.
run peft-rslora "--peft rslora $QV" "method=lora&peft=rslora&targets=q,v&$L"
run peft-dora "--peft dora $QV" "method=lora&peft=dora&targets=q,v&$L"
run peft-dora-all "--peft dora $ALL" "method=lora&peft=dora&targets=all-linear&$L"
run peft-lorafa "--peft lorafa $QV" "method=lora&peft=lorafa&targets=q,v&$L"
run peft-ia3 "--peft ia3 --targets k_proj,v_proj,down_proj" "method=lora&peft=ia3&targets=k,v,down&$L"
run peft-vera "--peft vera $QV --r 64" "method=lora&peft=vera&targets=q,v&${L/r=16/r=64}"
run peft-loha "--peft loha $QV" "method=lora&peft=loha&targets=q,v&$L"
run peft-oft "--peft oft $QV --r 8" "method=lora&peft=oft&targets=q,v&${L/r=16/r=8}"
run peft-ln "--peft ln" "method=lora&peft=ln&$L"
run peft-prompt "--peft prompt --vt 20" "method=lora&peft=prompt&vt=20&$L"
run peft-prefix "--peft prefix --vt 20" "method=lora&peft=prefix&vt=20&$L"
# Trainable tokens: the whole embedding and head through modules_to_save, or N rows of the embedding.
run tt-all "--mts embed_tokens,lm_head $QV" "method=lora&targets=q,v&tt=all&$L"
run tt-rows "--tokens 64 $QV" "method=lora&targets=q,v&tt=64&$L"
# Adapters in the model's dtype, and dropout in front of every adapter.
run adtype-bf16 "--adtype bf16 $ALL" "method=lora&targets=all-linear&${L/adtype=fp32/adtype=bf16}"
run dropout "--dropout 0.1 $ALL" "method=lora&targets=all-linear&${L/dropout=0/dropout=0.1}"
# Gradient accumulation, LoRA and full.
run lora-ga2 "--ga 2 $ALL" "method=lora&targets=all-linear&ga=2&$L"
run full-ga2 "--full --ga 2" "method=full&ga=2&opt=adamw_torch&prec=bf16"
# The Trainer's optimizers whose CPU step is the CUDA one. (bitsandbytes' 8-bit AdamW runs on a CPU, but its CPU
# kernel dequantizes both states and copies gradient and parameter to fp32 each step, which CUDA's does not.)
run full-fused "--full --opt adamw_torch_fused" "method=full&opt=adamw_torch_fused&prec=bf16"
run full-sgd "--full --opt sgd" "method=full&opt=sgd&prec=bf16"
run full-adafactor "--full --opt adafactor" "method=full&opt=adafactor&prec=bf16"

# The coverage table follows the data (ONLY= leaves the data alone).
if [[ -z ${ONLY:-} ]]; then "$here/coverage.sh"; fi

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
    emit "$row"
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
run peft-prompt-vt8 "--peft prompt --vt 8" "method=lora&peft=prompt&vt=8&$L"
# LoRA on the LM head too.
run lora-head "--targets q_proj,v_proj,lm_head" "method=lora&targets=q,v,lm_head&$L"
# Trainable tokens: the whole embedding and head through modules_to_save, or N rows of the embedding.
run tt-all "--mts embed_tokens,lm_head $QV" "method=lora&targets=q,v&tt=all&$L"
run tt-rows "--tokens 64 $QV" "method=lora&targets=q,v&tt=64&$L"
# Adapters in the model's dtype, and dropout in front of every adapter.
run adtype-bf16 "--adtype bf16 $ALL" "method=lora&targets=all-linear&${L/adtype=fp32/adtype=bf16}"
run dropout "--dropout 0.1 $ALL" "method=lora&targets=all-linear&${L/dropout=0/dropout=0.1}"
# Precision regimes beyond bf16: fp32, pure fp16, fp16 autocast over fp32 weights; fp16 adapters.
run lora-fp32 "--fp32 $ALL" "method=lora&targets=all-linear&${L/prec=bf16/prec=fp32}"
run full-fp32 "--full --fp32" "method=full&opt=adamw_torch&prec=fp32"
run lora-fp16 "--half fp16 $ALL" "method=lora&targets=all-linear&${L/prec=bf16/prec=fp16}"
run lora-fp16-adapters "--half fp16 --adtype fp16 $ALL" "method=lora&targets=all-linear&opt=adamw_torch&dropout=0&adtype=fp16&prec=fp16&r=16"
run lora-amp-fp16 "--half fp16 --amp $ALL" "method=lora&targets=all-linear&${L/prec=bf16/prec=amp_fp16}"
run lora-amp-fp16-fp32base "--half fp16 --fp32 --amp $ALL" "method=lora&targets=all-linear&upcast=1&${L/prec=bf16/prec=amp_fp16}"
run full-amp-fp16 "--full --half fp16 --fp32 --amp" "method=full&opt=adamw_torch&prec=amp_fp16"
# bitsandbytes' FP4 quantizer. (LLM.int8 runs on a CPU too, but through MatMul8bitFp, which dequantizes the weight
# and multiplies in 16-bit, where CUDA runs MatMul8bitLt: not the step the engine models.)
Q="method=qlora&r=16&targets=all-linear&dropout=0&adtype=fp32&opt=adamw_torch&qsave=0&upcast=0&dq=0"
run qlora-fp4-amp "--qlora --quant fp4 --amp $ALL" "$Q&quant=fp4&prec=amp_bf16"
# A loop that keeps the model's output (its logits) until after the optimizer's step: 16-bit logits, and fp32 ones
# from an fp32 model.
run hold16 "--hold $QV" "method=lora&targets=q,v&hold=16&$L"
run hold32 "--hold --fp32 $QV" "method=lora&targets=q,v&hold=32&${L/prec=bf16/prec=fp32}"
# torch.compile (inductor, as the Trainer's torch_compile wraps the model), LoRA and full.
run lora-compile "--compile $QV" "method=lora&targets=q,v&compile=1&$L"
run full-compile "--full --compile" "method=full&compile=1&opt=adamw_torch&prec=bf16"
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

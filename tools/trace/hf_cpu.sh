#!/usr/bin/env bash
# Regenerates crates/peakplan-core/tests/data/traced/hf_cpu.csv: each case traced at several layer counts, so
# that both the per-layer slope and the layer-independent part are pinned. Needs a Python with torch,
# transformers and peft (pip install torch transformers peft); takes a few minutes on two cores.
source "$(dirname "$0")/lib.sh"
out="$data/hf_cpu.csv"
# ONLY=REGEX runs the matching cases and prints their rows instead of rewriting the files.
[[ -z ${ONLY:-} ]] && echo "$llama_header" >"$out"
run() { # id, harness flags, plan keys
  [[ -n ${ONLY:-} && ! $1 =~ $ONLY ]] && return 0
  local tied=0
  case " $2 " in *" --tied "*) tied=1 ;; esac
  for layers in $LAYERS; do
    total=$(total_of hf_step.py "$layers" "$B" "$S" --hidden "$H" --inter "$I" --heads "$NH" --kv "$KV" --vocab "$V" $2)
    emit "$1-L$layers,$layers,$H,$I,$NH,$KV,$V,$tied,$total,b=$B&s=$S&loss=standard&opt=adamw_torch&fw=hf&gpus=1&$3" "$out"
  done
}
H=512 I=1376 NH=8 KV=8 V=32000 B=2 S=256 LAYERS="1 2 3"
run lora-qv-bf16 "" "attn=sdpa&method=lora&r=16&targets=q,v&dropout=0&adtype=fp32&gc=0&prec=bf16"
run lora-qv-bf16-gc "--gc" "attn=sdpa&method=lora&r=16&targets=q,v&dropout=0&adtype=fp32&gc=1&prec=bf16"
run lora-all-bf16 "--targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj" "attn=sdpa&method=lora&r=16&targets=all-linear&dropout=0&adtype=fp32&gc=0&prec=bf16"
run lora-qv-amp "--amp" "attn=sdpa&method=lora&r=16&targets=q,v&dropout=0&adtype=fp32&gc=0&prec=amp_bf16"
run lora-all-amp-gc "--amp --gc --targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj" "attn=sdpa&method=lora&r=16&targets=all-linear&dropout=0&adtype=fp32&gc=1&prec=amp_bf16"
run full-bf16 "--full" "attn=sdpa&method=full&gc=0&prec=bf16"
run full-bf16-gc "--full --gc" "attn=sdpa&method=full&gc=1&prec=bf16"
run full-amp "--full --fp32 --amp" "attn=sdpa&method=full&gc=0&prec=amp_bf16"
# QLoRA: bitsandbytes NF4 (CPU backend), with and without prepare_model_for_kbit_training's fp32 upcast.
QL="method=qlora&quant=nf4&qsave=0&dropout=0&adtype=fp32"
run qlora-qv-amp "--qlora --amp" "attn=sdpa&$QL&r=16&targets=q,v&gc=0&prec=amp_bf16&upcast=0&dq=0"
run qlora-qv-upcast-amp "--qlora --upcast --amp" "attn=sdpa&$QL&r=16&targets=q,v&gc=0&prec=amp_bf16&upcast=1&dq=0"
run qlora-all-upcast-amp "--qlora --upcast --amp --targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj" "attn=sdpa&$QL&r=16&targets=all-linear&gc=0&prec=amp_bf16&upcast=1&dq=0"
run qlora-all-r64-upcast-amp-gc-dq "--qlora --upcast --amp --gc --dq --r 64 --targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj" "attn=sdpa&$QL&r=64&targets=all-linear&gc=1&prec=amp_bf16&upcast=1&dq=1"
run qlora-all-bf16-gc "--qlora --gc --targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj" "attn=sdpa&$QL&r=16&targets=all-linear&gc=1&prec=bf16&upcast=0&dq=0"
# Grouped-query attention: transformers hands SDPA the grouped keys and values when nothing is padded.
KV=2 LAYERS="1 2"
run gqa-lora-qv-bf16 "" "attn=flash&method=lora&r=16&targets=q,v&dropout=0&adtype=fp32&gc=0&prec=bf16"
KV=8
run tied-lora-qv-bf16 "--tied" "attn=sdpa&method=lora&r=16&targets=q,v&dropout=0&adtype=fp32&gc=0&prec=bf16"
run tied-full-bf16 "--tied --full" "attn=sdpa&method=full&gc=0&prec=bf16"
H=384 I=1024 NH=6 KV=6 V=50000 B=1 S=384 LAYERS="1 3"
run w-lora-all-r64-amp "--amp --r 64 --targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj" "attn=sdpa&method=lora&r=64&targets=all-linear&dropout=0&adtype=fp32&gc=0&prec=amp_bf16"
run w-full-amp-gc "--full --fp32 --amp --gc" "attn=sdpa&method=full&gc=1&prec=amp_bf16"
run w-lora-qv-bf16-gc "--gc" "attn=sdpa&method=lora&r=16&targets=q,v&dropout=0&adtype=fp32&gc=1&prec=bf16"

# Other families, from the presets' own config.json scaled down (hf_step.py --preset): each traced config is kept
# in traced/configs/ so that the test imports exactly what was traced.
fam="$data/families.csv"
cfgs="$data/configs"
presets="$here/../../crates/peakplan-core/presets"
mkdir -p "$cfgs"
[[ -z ${ONLY:-} ]] && echo "id,config,traced_peak_allocated_bytes,query" >"$fam"
# BUILD=--config builds the config.json as it is instead of scaling a preset down (hf_step.py).
runf() { # id, preset, harness flags, plan keys
  [[ -n ${ONLY:-} && ! $1 =~ $ONLY ]] && return 0
  for layers in 1 2; do
    local id="$1-L$layers"
    local src="$presets/$2.json"
    [[ $2 == */* ]] && src="$2"  # a config.json outside the presets (OLMo 2)
    total=$(total_of hf_step.py "$layers" "${FB:-2}" "${FS:-256}" "${BUILD:---preset}" "$src" --json "$cfgs/$id.json" $3)
    emit "$id,configs/$id.json,$total,b=${FB:-2}&s=${FS:-256}&loss=standard&opt=adamw_torch&fw=hf&gpus=1&$4" "$fam"
  done
}
LORA="method=lora&r=16&targets=q,v&dropout=0&adtype=fp32&gc=0&prec=bf16"
FULL="method=full&gc=0&prec=bf16"
runf gemma-full gemma-7b "--full" "attn=sdpa&$FULL"
runf gemma-lora gemma-7b "" "attn=sdpa&$LORA"
runf gemma2-full gemma-2-9b "--full" "attn=eager&$FULL"
runf gemma2-lora gemma-2-9b "" "attn=eager&$LORA"
runf phi2-full phi-2 "--full --hidden 640" "attn=sdpa&$FULL"
runf qwen25-lora qwen2.5-0.5b "" "attn=flash&$LORA"
runf mistral-full mistral-7b "--full" "attn=flash&$FULL"
runf mixtral-full mixtral-8x7b "--full" "attn=flash&$FULL"
runf mixtral-lora mixtral-8x7b "" "attn=flash&$LORA"
runf pythia-full pythia-1.4b "--full" "attn=sdpa&$FULL"
runf falcon-full falcon-7b "--full" "attn=flash&$FULL"
runf phi3-lora phi-3-mini "--targets qkv_proj" "attn=sdpa&method=lora&r=16&targets=q,k,v&dropout=0&adtype=fp32&gc=0&prec=bf16"
runf phi3-full phi-3-mini "--full" "attn=sdpa&$FULL"
QLU="method=qlora&quant=nf4&qsave=0&dropout=0&adtype=fp32&r=16&targets=q,v&prec=amp_bf16&upcast=1&dq=0"
runf gemma2-qlora-upcast gemma-2-9b "--qlora --upcast --amp" "attn=eager&$QLU&gc=0"
runf qwen25-qlora-upcast qwen2.5-0.5b "--qlora --upcast --amp" "attn=flash&$QLU&gc=0"
runf gemma-qlora-upcast-gc gemma-7b "--qlora --upcast --amp --gc" "attn=sdpa&$QLU&gc=1"
# Query/key norms (Qwen3, Gemma 3): each keeps its fp32 input and a statistic per head.
runf qwen3-lora qwen3-8b "" "attn=flash&$LORA"
runf qwen3-full qwen3-8b "--full" "attn=flash&$FULL"
runf gemma3-lora gemma-3-1b "" "attn=flash&$LORA"
runf gemma3-full gemma-3-1b "--full" "attn=flash&$FULL"
runf qwen3moe-lora qwen3-30b-a3b "" "attn=flash&$LORA"
# OLMo 2 (OLMo-2-1124-7B's shapes; only the family and its ratios reach the scaled model) normalizes the whole q
# and k projections, and multiplies by its norm weights in fp32.
runf olmo2-lora "$here/olmo2-1124-7b.json" "" "attn=sdpa&$LORA"
runf olmo2-full "$here/olmo2-1124-7b.json" "--full" "attn=sdpa&$FULL"
# Routers that train keep their own input beside the experts' routed copies.
runf qwen3moe-full qwen3-30b-a3b "--full" "attn=flash&$FULL"
# transformers 5 stores MoE experts as 3D parameters, which bitsandbytes leaves in bf16 (fp32 once upcast).
runf qwen3moe-qlora qwen3-30b-a3b "--qlora" "attn=flash&method=qlora&quant=nf4&qsave=0&dropout=0&adtype=fp32&r=16&targets=q,v&prec=bf16&upcast=0&dq=0&gc=0"
runf qwen3moe-qlora-upcast qwen3-30b-a3b "--qlora --upcast --amp" "attn=flash&$QLU&gc=0"
# LoRA on those 3D experts (PEFT target_parameters) builds each layer's dense W + BA and keeps it for backward.
runf qwen3moe-lora-experts qwen3-30b-a3b "--target-params mlp.experts.gate_up_proj,mlp.experts.down_proj" "attn=flash&method=lora&r=16&targets=q,v,gate,up,down&dropout=0&adtype=fp32&gc=0&prec=bf16"
# Qwen2-MoE: a dense shared expert, scaled by a sigmoid gate, beside the routed ones; LoRA on gate/up/down adapts
# the shared expert's linears and, through target_parameters, the 3D routed experts.
runf qwen2moe-lora qwen1.5-moe-a2.7b "" "attn=flash&$LORA"
runf qwen2moe-full qwen1.5-moe-a2.7b "--full" "attn=flash&$FULL"
runf qwen2moe-qlora qwen1.5-moe-a2.7b "--qlora" "attn=flash&method=qlora&quant=nf4&qsave=0&dropout=0&adtype=fp32&r=16&targets=q,v&prec=bf16&upcast=0&dq=0&gc=0"
runf qwen2moe-lora-mlp qwen1.5-moe-a2.7b "--targets q_proj,v_proj,gate_proj,up_proj,down_proj --target-params mlp.experts.gate_up_proj,mlp.experts.down_proj" "attn=flash&method=lora&r=16&targets=q,v,gate,up,down&dropout=0&adtype=fp32&gc=0&prec=bf16"
# gpt-oss: attention sinks (eager only), clamped SwiGLU experts, a router that softmaxes its top k.
runf gptoss-lora gpt-oss-20b "" "attn=eager&$LORA"
runf gptoss-full gpt-oss-20b "--full" "attn=eager&$FULL"
# The same at 2048 tokens, where the activations, not the optimizer step, make the peak.
FB=4 FS=512 runf gptoss-full-t2048 gpt-oss-20b "--full" "attn=eager&$FULL"
# Gemma 3's image-text model (what AutoModelForCausalLM loads for it): bitsandbytes quantizes the SigLIP tower's
# linears too, and text-only training never runs the tower. gemma3-scaled.json is built as it is.
BUILD=--config runf gemma3mm-qlora "$here/gemma3-scaled.json" "--qlora" "attn=flash&method=qlora&quant=nf4&qsave=0&dropout=0&adtype=fp32&r=16&targets=q,v&prec=bf16&upcast=0&dq=0&gc=0"
BUILD=--config runf gemma3mm-qlora-upcast "$here/gemma3-scaled.json" "--qlora --upcast --amp" "attn=flash&$QLU&gc=0"
# GPT-2's layout (Conv1D linears, learned positions, a tied head): GPT-BigCode's multi-query attention (handed to
# SDPA grouped, hence attn=flash), and GPT-3's shape (never released; peakplan reads it through the GPT-2 layout,
# which hf_step.py builds for it). Their configs' own dropout is turned off (hf_step.py).
runf bigcode-full starcoderbase-1b "--full" "attn=flash&$FULL"
runf bigcode-lora starcoderbase-1b "--targets c_attn" "attn=flash&method=lora&r=16&targets=q,k,v&dropout=0&adtype=fp32&gc=0&prec=bf16"
runf gpt3-full gpt3-175b "--full" "attn=sdpa&$FULL"
# transformers 4's MoE layout (one nn.Linear per expert, `moe=linear`): bitsandbytes quantizes every expert and
# LoRA adapts each one. TF4 names a folder holding transformers 4.57.1 for the same Python (README).
if [[ -z ${ONLY:-} || mixtral4-qlora =~ $ONLY || mixtral4-lora-experts =~ $ONLY ]]; then
  : "${TF4:?TF4 must name a folder with transformers 4.57.1 (tools/trace/README.md)}"
fi
PYTHONPATH=${TF4:-} runf mixtral4-qlora mixtral-8x7b "--qlora" "attn=flash&method=qlora&quant=nf4&qsave=0&dropout=0&adtype=fp32&r=16&targets=q,v&prec=bf16&upcast=0&dq=0&gc=0&moe=linear"
PYTHONPATH=${TF4:-} runf mixtral4-lora-experts mixtral-8x7b "--targets q_proj,v_proj,w1,w2,w3" "attn=flash&method=lora&r=16&targets=q,v,gate,up,down&dropout=0&adtype=fp32&gc=0&prec=bf16&moe=linear"

# The coverage table follows the data.
if [[ -z ${ONLY:-} ]]; then "$here/coverage.sh"; fi

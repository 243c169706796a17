#!/usr/bin/env bash
# Regenerates crates/peakplan-core/tests/data/traced/sequences.csv and sequences/: real allocation sequences
# (hf_step.py with SEQUENCE=, memtrace.sequence_of) at real widths, for the core test
# `traced_sequences_replay_as_the_engine`, which replays each through the caching-allocator simulator beside the
# engine's own sequence. Llama-2-7B's layer widths and vocabulary, one to eight layers, so a layer's tensors
# have the sizes a 7B run hands the allocator. Matrix products are not computed (memtrace.SkipMatmuls). Needs the Python of hf_cpu.sh (torch, transformers, peft,
# bitsandbytes for QLoRA); about 25 minutes on two cores.
source "$(dirname "$0")/lib.sh"
out="$data/sequences.csv"
dir="$data/sequences"
mkdir -p "$dir"
[[ -z ${ONLY:-} ]] && echo "$llama_header" >"$out"
run() { # id, harness flags, plan keys
  [[ -n ${ONLY:-} && ! $1 =~ $ONLY ]] && return 0
  for layers in $LAYERS; do
    local id="$1-L$layers"
    total=$(SKIP_MATMULS=1 SEQUENCE="$dir/$id.csv" total_of hf_step.py "$layers" "$B" "$S" --hidden "$H" --inter "$I" --heads "$NH" --kv "$KV" --vocab "$V" $2)
    row="$id,$layers,$H,$I,$NH,$KV,$V,0,$total,b=$B&s=$S&loss=standard&opt=adamw_torch&fw=hf&gpus=1&gpu=h200-141gb&$3"
    emit "$row"
  done
}
H=4096 I=11008 NH=32 KV=32 V=32000 B=1 S=1024 LAYERS="1 2 4 8"
run seq-lora-qv-bf16 "" "attn=sdpa&method=lora&r=16&targets=q,v&dropout=0&adtype=fp32&gc=0&prec=bf16"
LAYERS="1 2 4"
run seq-lora-qv-bf16-gc "--gc" "attn=sdpa&method=lora&r=16&targets=q,v&dropout=0&adtype=fp32&gc=1&prec=bf16"
run seq-lora-all-amp "--amp --targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj" "attn=sdpa&method=lora&r=16&targets=all-linear&dropout=0&adtype=fp32&gc=0&prec=amp_bf16"
run seq-full-bf16 "--full" "attn=sdpa&method=full&gc=0&prec=bf16"
# bitsandbytes dequantizes on the CPU for real (no matmul to skip): several minutes a layer count.
LAYERS="1 2"
QL="method=qlora&quant=nf4&qsave=0&dropout=0&adtype=fp32"
run seq-qlora-all-upcast-amp-gc "--qlora --upcast --amp --gc --targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj" "attn=sdpa&$QL&r=16&targets=all-linear&gc=1&prec=amp_bf16&upcast=1&dq=0"

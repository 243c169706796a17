#!/usr/bin/env bash
# Regenerates crates/peakplan-core/tests/data/traced/sequences_varying.csv and its sequences/: allocation sequences
# of runs whose batches vary in length (#45), for the core test `traced_varying_sequences_replay_as_the_engine`.
# Each case is a plan with `lens=padded` or `grouped`; its steps' batch lengths are the ones peakplan's replay draws
# for that plan (`peakplan estimate --format json`: `replayed_batches`), and hf_step.py runs them in that order,
# twice over (the replay's first pass and its measured second), each batch `b` rows padded to its length, made at
# the step's start. Llama-2-7B's widths (seq_cpu.sh's), matrix products skipped (memtrace.SkipMatmuls). Needs the
# Python of hf_cpu.sh and cargo (for the lengths); about 40 minutes on two cores.
source "$(dirname "$0")/lib.sh"
out="$data/sequences_varying.csv"
dir="$data/sequences"
mkdir -p "$dir"
root="$here/../.."
[[ -z ${ONLY:-} ]] && echo "$llama_header" >"$out"
lengths_of() { # plan query -> the replayed batches' lengths, comma-separated
  (cd "$root" && cargo run -q --release -p peakplan-cli -- estimate --query "model=llama-2-7b&$1" --format json) |
    "$py" -c 'import json, sys; print(",".join(str(b["len"]) for b in json.load(sys.stdin)["replayed_batches"]))'
}
run() { # id, harness flags, plan keys
  [[ -n ${ONLY:-} && ! $1 =~ $ONLY ]] && return 0
  local keys="b=$B&s=$S&$LENS&loss=standard&opt=adamw_torch&fw=hf&gpus=1&gpu=h200-141gb&$3"
  local lens steps
  lens=$(lengths_of "$keys")
  steps=$(( 2 * $(tr ',' '\n' <<<"$lens" | wc -l) ))
  for layers in $LAYERS; do
    local id="$1-L$layers"
    SKIP_MATMULS=1 SEQUENCE="$dir/$id.csv" SEQUENCE_STEPS=$steps total_of hf_step.py "$layers" "$B" "$S" \
      --hidden "$H" --inter "$I" --heads "$NH" --kv "$KV" --vocab "$V" --lens "$lens" $2 >/dev/null
    # The row's peak is the sequence's own: the most its live allocations ever add up to.
    total=$(sequence_peak "$dir/$id.csv")
    row="$id,$layers,$H,$I,$NH,$KV,$V,0,$total,$keys"
    emit "$row"
  done
}
H=4096 I=11008 NH=32 KV=32 V=32000 B=4 S=1024 LAYERS="1 2 4"
LORA="attn=sdpa&method=lora&r=16&targets=q,v&dropout=0&adtype=fp32"
ALL="attn=sdpa&method=lora&r=16&targets=all-linear&dropout=0&adtype=fp32"
ALLT="--targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
# A dataset of 300 +- 200 tokens, cut at 1,024.
LENS="lens=padded&lmean=300&lsd=200"
run var-lora-qv-padded "" "$LORA&gc=0&prec=bf16"
LAYERS="1 4"
run var-lora-qv-padded-gc "--gc" "$LORA&gc=1&prec=bf16"
run var-full-padded "--full" "attn=sdpa&method=full&gc=0&prec=bf16"
LENS="lens=grouped&lmean=300&lsd=200"
run var-lora-qv-grouped "" "$LORA&gc=0&prec=bf16"
run var-lora-all-amp-grouped "--amp $ALLT" "$ALL&gc=0&prec=amp_bf16"
run var-full-grouped-gc "--full --gc" "attn=sdpa&method=full&gc=1&prec=bf16"

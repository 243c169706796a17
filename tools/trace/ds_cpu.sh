#!/usr/bin/env bash
# Regenerates crates/peakplan-core/tests/data/traced/ds_cpu.csv: DeepSpeed ZeRO steps (fsdp_step.py --ds) on its
# CPU accelerator over gloo, 2 and 4 processes, each case at one and two layers, with DeepSpeed's sizes scaled down
# to the traced model (hidden 512: a layer is 3.16M parameters, the embedding and the head 16.4M each) so that each
# limit binds. `-load-` cases measure loading instead of a step (`--load`: the model made on the accelerator, then
# DeepSpeed's initialize). Needs a Python with torch, transformers, peft and deepspeed (and ninja on PATH: the
# shared-memory op and FusedAdam build at first use); about 30 minutes on two cores. ONLY=REGEX prints the matching
# cases' rows instead (the file is left alone).
source "$(dirname "$0")/lib.sh"
out="$data/ds_cpu.csv"
[[ -z ${ONLY:-} ]] && echo "$llama_header" >"$out"
run() { # id, world, zero stage, harness flags, plan keys
  [[ -n ${ONLY:-} && ! $1 =~ $ONLY ]] && return 0
  for layers in 1 2; do
    # Loading is measured once a process, and a process's load may hold a buffer a reference cycle keeps until
    # Python's collector runs (32 MB apart between runs at one layer): the smallest of three processes.
    if [[ $4 == *--load* ]]; then runs=3; else runs=1; fi
    total=
    for ((i = 0; i < runs; i++)); do
      t=$(total_of fsdp_step.py "$2" "$layers" "$B" "$S" --hidden "$H" --inter "$I" --heads "$NH" --kv "$KV" \
        --vocab "$V" --ds "$3" $4)
      if [[ -z $total ]] || ((t < total)); then total=$t; fi
    done
    line="$1-L$layers,$layers,$H,$I,$NH,$KV,$V,0,$total,b=$B&s=$S&loss=standard&fw=hf&attn=sdpa&gpus=$2&zero=$3&shard=deepspeed&gc=0&prec=bf16&$5"
    emit "$line"
  done
}
LORA="method=lora&r=16&targets=q,v&dropout=0&adtype=bf16"
# A config's "AdamW" is DeepSpeed's FusedAdam (in place, no temporaries): the plan's fused torch AdamW.
FUSED="--ds-opt fused"
OPT="opt=adamw_torch_fused"
# A 32,000-token vocabulary: the peak is the loss's backward, unless a reduce bucket is large.
H=512 I=1376 NH=8 KV=8 V=32000 B=2 S=256
run ds1-full-w2 2 1 "--full $FUSED" "method=full&$OPT"
run ds1-lora-w2 2 1 "$FUSED" "$LORA&$OPT"
run ds2-full-w2 2 2 "--full $FUSED" "method=full&$OPT"
run ds2-lora-w2 2 2 "$FUSED" "$LORA&$OPT"
run ds2-full-w4 4 2 "--full $FUSED" "method=full&$OPT"
# Reduce buckets of 8M elements (16 MB in bf16), two under overlap_comm: made at the first gradient, after the
# loss's backward, so the peak is unchanged.
run ds2-full-rbucket-ov-w2 2 2 "--full $FUSED --ds-rbucket 8000000 --ds-overlap 1" \
  "method=full&$OPT&ds_rbucket=8000000&ds_overlap=1"
# Of 60M elements (120 MB): the layers' backward is the peak, with one or two buckets, none without
# contiguous_gradients.
R60="--ds-rbucket 60000000"
run ds2-full-rbucket60-w2 2 2 "--full $FUSED $R60 --ds-overlap 0" "method=full&$OPT&ds_rbucket=60000000&ds_overlap=0"
run ds2-full-rbucket60-ov-w2 2 2 "--full $FUSED $R60 --ds-overlap 1" "method=full&$OPT&ds_rbucket=60000000&ds_overlap=1"
run ds1-full-rbucket60-w2 2 1 "--full $FUSED $R60" "method=full&$OPT&ds_rbucket=60000000"
run ds2-lora-rbucket60-ov-w2 2 2 "$FUSED $R60 --ds-overlap 1" "$LORA&$OPT&ds_rbucket=60000000&ds_overlap=1"
run ds2-full-rbucket60-contig0-w2 2 2 "--full $FUSED $R60 --ds-contig 0" \
  "method=full&$OPT&ds_rbucket=60000000&ds_contig=0"
# ZeRO-3.
run ds3-full-w2 2 3 "--full $FUSED" "method=full&$OPT"
run ds3-lora-w2 2 3 "$FUSED" "$LORA&$OPT"
run ds3-full-w4 4 3 "--full $FUSED" "method=full&$OPT"
run ds3-lora-zinit0-w2 2 3 "$FUSED --zinit 0" "$LORA&$OPT&zinit=0"
# A reuse distance of 34M elements: the head (16.4M) and the last layer's down projection stay gathered from
# forward to backward, the rest is released after use (the default, 10^9, keeps all of so small a model). Beside
# it: live parameters below what stays (no prefetch), a prefetch bucket of 3M elements (about a layer), and a
# persistence threshold between the adapters (8,192 elements) and the layers' weights (262,144 and up).
# A module released after its forward is gathered again by the prefetcher for its backward a few modules later
# (the coordinator's gathers and releases, logged): the engine replays that. The largest of a case's four steps may
# hold one more vocab x hidden all-gather buffer that a reference cycle keeps until Python's collector runs (the
# step ends with it allocated): the core test holds those rows to the steady step.
REUSE="--ds-reuse 34000000"
run ds3-full-reuse-w2 2 3 "--full $FUSED $REUSE" "method=full&$OPT&ds_reuse=34000000"
run ds3-full-reuse-live-w2 2 3 "--full $FUSED $REUSE --ds-live 2000000" "method=full&$OPT&ds_reuse=34000000&ds_live=2000000"
run ds3-full-reuse-prefetch-w2 2 3 "--full $FUSED $REUSE --ds-prefetch 3000000" \
  "method=full&$OPT&ds_reuse=34000000&ds_prefetch=3000000"
run ds3-lora-reuse-w2 2 3 "$FUSED $REUSE" "$LORA&$OPT&ds_reuse=34000000"
run ds3-lora-reuse-persist-w2 2 3 "$FUSED $REUSE --ds-persist 20000" "$LORA&$OPT&ds_reuse=34000000&ds_persist=20000"
# Loading under ZeRO-3, with zero.Init and without.
run ds3-lora-load-zinit1-w2 2 3 "$FUSED --load --zinit 1" "$LORA&$OPT&zinit=1"
run ds3-lora-load-zinit0-w2 2 3 "$FUSED --load --zinit 0" "$LORA&$OPT&zinit=0"
run ds3-full-load-zinit1-w2 2 3 "--full $FUSED --load --zinit 1" "method=full&$OPT&zinit=1"
run ds3-full-load-zinit0-w2 2 3 "--full $FUSED --load --zinit 0" "method=full&$OPT&zinit=0"

# A 1,000-token vocabulary and one short sequence: the peak is the optimizer step. (ZeRO-1's first measured
# step is not the next one's on a CPU, 52.6 then 50.6 MB: not traced.)
H=512 I=1376 NH=8 KV=8 V=1000 B=1 S=64
run step-ds2-full-w2 2 2 "--full $FUSED" "method=full&$OPT"
run step-ds2-full-w4 4 2 "--full $FUSED" "method=full&$OPT"
run step-ds3-full-w2 2 3 "--full $FUSED" "method=full&$OPT"
# ZeRO-3's optimizer steps its partition a sub-group at a time: sub-groups of 1M elements (the partition is 2.1M
# at one layer, 3.7M at two).
run step-ds3-full-sub-w2 2 3 "--full $FUSED --ds-sub 1000000" "method=full&$OPT&ds_sub=1000000"

# The coverage table follows the data (ONLY= leaves the data alone).
if [[ -z ${ONLY:-} ]]; then "$here/coverage.sh"; fi

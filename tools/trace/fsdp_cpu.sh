#!/usr/bin/env bash
# Regenerates crates/peakplan-core/tests/data/traced/fsdp_cpu.csv: sharded steps (fsdp_step.py) on 2 and 4 local
# processes, each case at one and two layers so that what one layer adds is pinned too. Needs a Python with
# torch, transformers and peft; about 40 minutes on two cores. ONLY=REGEX prints the matching cases' rows instead
# (the file is left alone), to rerun a few.
source "$(dirname "$0")/lib.sh"
out="$data/fsdp_cpu.csv"
[[ -z ${ONLY:-} ]] && echo "$llama_header" >"$out"
run() { # id, world, harness flags, plan keys
  [[ -n ${ONLY:-} && ! $1 =~ $ONLY ]] && return 0
  local gpus="gpus=$2&zero=${ZERO:-3}"
  [[ $2 == 1 ]] && gpus="gpus=1"
  for layers in 1 2; do
    total=$(total_of fsdp_step.py "$2" "$layers" "$B" "$S" --hidden "$H" --inter "$I" --heads "$NH" --kv "$KV" \
      --vocab "$V" $3)
    line="$1-L$layers,$layers,$H,$I,$NH,$KV,$V,0,$total,b=$B&s=$S&loss=standard&opt=adamw_torch&fw=hf&attn=sdpa&$gpus&$4"
    emit "$line"
  done
}
# Under pure bf16 the harness casts PEFT's adapters to bf16 (FSDP1 needs one dtype per flat parameter).
LORA="method=lora&r=16&targets=q,v&dropout=0&adtype=bf16"
# `--amp` builds the model in fp32 and lets FSDP's policy gather it in bf16: an fp32 LoRA base (`upcast=1`).
AMP_LORA="method=lora&r=16&targets=q,v&dropout=0&adtype=fp32&upcast=1"
BF="gc=0&prec=bf16"

# A 32,000-token vocabulary: the loss's backward is the peak, with the root unit and the prefetched last layer.
H=512 I=1376 NH=8 KV=8 V=32000 B=2 S=256
for w in 2 4; do
  run f1-lora-block-w$w "$w" "" "$LORA&$BF&shard=fsdp1&wrap=block"
  run f1-lora-block-ga2-w$w "$w" "--ga 2" "$LORA&$BF&shard=fsdp1&wrap=block&ga=2&gsync=0"
  run f1-lora-lorawrap-orig0-w$w "$w" "--wrap lora --orig 0" "$LORA&$BF&shard=fsdp1&wrap=lora"
  run f1-full-w$w "$w" "--full" "method=full&$BF&shard=fsdp1"
  run f1-full-ga2-w$w "$w" "--full --ga 2" "method=full&$BF&shard=fsdp1&ga=2&gsync=0"
  run f2-lora-w$w "$w" "--fsdp 2" "$LORA&$BF&shard=fsdp2"
  run f2-full-w$w "$w" "--fsdp 2 --full" "method=full&$BF&shard=fsdp2"
done
run f1-lora-lorawrap-orig1-w2 2 "--wrap lora" "$LORA&$BF&shard=fsdp1&wrap=lora"
run f1-lora-lorawrap-orig0-ga2-w2 2 "--wrap lora --orig 0 --ga 2" "$LORA&$BF&shard=fsdp1&wrap=lora&ga=2&gsync=0"
run f1-lora-block-amp-w2 2 "--amp" "$AMP_LORA&gc=0&prec=amp_bf16&shard=fsdp1&wrap=block"
run f1-lora-block-gc-w2 2 "--gc" "$LORA&gc=1&prec=bf16&shard=fsdp1&wrap=block"
run f1-full-ga2-sync-w2 2 "--full --ga 2 --sync" "method=full&$BF&shard=fsdp1&ga=2&gsync=1"
run f1-full-gc-w2 2 "--full --gc" "method=full&gc=1&prec=bf16&shard=fsdp1"
run f2-lora-ga2-w2 2 "--fsdp 2 --ga 2" "$LORA&$BF&shard=fsdp2&ga=2&gsync=0"
run f2-lora-ga2-sync-w2 2 "--fsdp 2 --ga 2 --sync" "$LORA&$BF&shard=fsdp2&ga=2&gsync=1"
run f2-lora-amp-w2 2 "--fsdp 2 --amp" "$AMP_LORA&gc=0&prec=amp_bf16&shard=fsdp2"
run f2-lora-gc-w2 2 "--fsdp 2 --gc" "$LORA&gc=1&prec=bf16&shard=fsdp2"
run f2-full-ga2-w2 2 "--fsdp 2 --full --ga 2" "method=full&$BF&shard=fsdp2&ga=2&gsync=0"

# QLoRA as the Trainer shards it: bitsandbytes NF4 stored in bf16 (`bnb_4bit_quant_storage`), PEFT's wrap policy.
QLORA="method=qlora&quant=nf4&dq=0&upcast=0&qsave=0&r=16&targets=q,v&dropout=0&adtype=bf16"
run f1-qlora-lorawrap-orig0-w2 2 "--qlora --wrap lora --orig 0" "$QLORA&$BF&shard=fsdp1&wrap=lora"
run f1-qlora-lorawrap-orig0-ga2-w2 2 "--qlora --wrap lora --orig 0 --ga 2" "$QLORA&$BF&shard=fsdp1&wrap=lora&ga=2&gsync=0"
run f1-qlora-lorawrap-orig0-w4 4 "--qlora --wrap lora --orig 0" "$QLORA&$BF&shard=fsdp1&wrap=lora"

# Not replayed: a full fine-tune under FSDP's mixed precision (fp32 shards as the master weights, gradients
# reduced in fp32). Traced at 615 MB (FSDP1) and 562 MB (FSDP2) where the engine says 538 MB, one layer at
# 38.0 MB and 25.3 MB where it says 36.7 MB; not modelled yet:
#   run f1-full-amp-w2 2 "--full --amp" "method=full&gc=0&prec=amp_bf16&shard=fsdp1"
#   run f2-full-amp-w2 2 "--fsdp 2 --full --amp" "method=full&gc=0&prec=amp_bf16&shard=fsdp2"

# DeepSpeed ZeRO on its CPU accelerator (ninja on PATH for its shared-memory op): bf16 runs the module in bf16
# with fp32 master partitions and fp32 Adam states; ZeRO-2 shards gradients and states, ZeRO-3 the weights too.
ZERO=2 run ds2-lora-w2 2 "--ds 2" "$LORA&$BF&shard=deepspeed"
ZERO=1 run ds1-lora-w2 2 "--ds 1" "$LORA&$BF&shard=deepspeed"
# DistributedDataParallel: every GPU holds the whole model, and the gradient buckets beside the gradients.
ZERO=0 run ddp-lora-w2 2 "--ddp" "$LORA&$BF"
ZERO=0 run ddp-full-w2 2 "--ddp --full" "method=full&$BF"
# ZeRO-2 full fine-tuning, ZeRO-3 and DeepSpeed's own sizes: ds_cpu.sh.

# A 1,000-token vocabulary and a wide MLP: the layers' backward is the peak, with the running layer, the next one
# prefetched (none when adapters are units of their own) and the root unit. The same model unsharded (WORLD 1,
# the wide-single rows) is the reference the core test holds these to.
H=512 I=4096 NH=8 KV=8 V=1000 B=4 S=512
run wide-single-lora 1 "" "$LORA&$BF"
run wide-single-full 1 "--full" "method=full&$BF"
run wide-f1-lora-block-w2 2 "" "$LORA&$BF&shard=fsdp1&wrap=block"
run wide-f1-lora-lorawrap-orig0-w2 2 "--wrap lora --orig 0" "$LORA&$BF&shard=fsdp1&wrap=lora"
run wide-f2-lora-w2 2 "--fsdp 2" "$LORA&$BF&shard=fsdp2"
run wide-f1-full-w2 2 "--full" "method=full&$BF&shard=fsdp1"
run wide-f2-full-w2 2 "--fsdp 2 --full" "method=full&$BF&shard=fsdp2"
run wide-f1-lora-block-ga2-w2 2 "--ga 2" "$LORA&$BF&shard=fsdp1&wrap=block&ga=2&gsync=0"
run wide-f2-lora-ga2-w2 2 "--fsdp 2 --ga 2" "$LORA&$BF&shard=fsdp2&ga=2&gsync=0"
run wide-f1-lora-block-w4 4 "" "$LORA&$BF&shard=fsdp1&wrap=block"

# The coverage table follows the data (ONLY= leaves the data alone).
if [[ -z ${ONLY:-} ]]; then "$here/coverage.sh"; fi

#!/usr/bin/env bash
# Regenerates crates/peakplan-core/tests/data/traced/grpo_cpu.csv: GRPO steps through TRL's own GRPOTrainer
# (grpo_step.py: one generation round with `model.generate`, the reference's log-probabilities when beta > 0, the
# reward, then ga micro-batches of forward and backward, a foreach AdamW step), each case at two layer counts so
# that what a layer adds is pinned. Needs a Python with torch, transformers, peft, datasets and trl
# (pip install torch transformers peft datasets trl==1.16.0); OMP_NUM_THREADS=1 keeps it on one core. The TRL
# release is in each row's `source`. ONLY=regex runs the matching cases and prints their rows instead of writing.
# In peakplan's words `b` is the prompts of a generation round, `gens` the completions of each (TRL's generation
# batch is b x gens sequences, trained in ga micro-batches of b x gens / ga), `s` = prompt + completion, and
# every completion runs to `completion` tokens (the harness's EOS cannot be sampled).
source "$(dirname "$0")/lib.sh"
out="$data/grpo_cpu.csv"
trl=$("$py" -c 'import trl; print(trl.__version__)')
[[ -z ${ONLY:-} ]] && echo "id,layers,hidden,intermediate,heads,kv_heads,vocab,tied,traced_peak_allocated_bytes,source,query" >"$out"
run() { # id, harness flags, gc (0|1), plan's method keys
  [[ -n ${ONLY:-} && ! $1 =~ $ONLY ]] && return 0
  local gcflag=""
  [[ $3 == 1 ]] && gcflag="--gc"
  for layers in $LAYERS; do
    total=$(total_of grpo_step.py "$layers" "$B" "$G" "$P" "$C" --beta "$BETA" --ga "$GA" $gcflag --hidden "$H" \
      --inter "$I" --heads "$NH" --kv "$KV" --vocab "$V" $2)
    emit "$1-L$layers,$layers,$H,$I,$NH,$KV,$V,0,$total,trl-$trl,b=$B&s=$((P + C))&prompt=$P&completion=$C&task=grpo&gens=$G&beta=$BETA&ga=$GA&loss=standard&opt=adamw_torch&fw=hf&gpus=1&attn=sdpa&prec=bf16&gc=$3&$4"
  done
}
H=512 I=1376 NH=8 KV=8 V=32000 LAYERS="1 2"
B=2 G=4 P=32 C=32 BETA=0 GA=1
LORA="method=lora&r=16&targets=q,v&dropout=0&adtype=fp32"
FULL="method=full"
run grpo-lora-qv "" 0 "$LORA"
run grpo-lora-qv-gc "" 1 "$LORA"
BETA=0.04 run grpo-lora-qv-beta "" 0 "$LORA"
run grpo-full "--full" 0 "$FULL"
BETA=0.04 run grpo-full-beta "--full" 0 "$FULL"
# More completions per prompt, the generation round split in two micro-batches, grouped-query attention.
G=8 run grpo-lora-qv-g8 "" 0 "$LORA"
GA=2 run grpo-lora-qv-ga2 "" 0 "$LORA"
KV=2 run grpo-lora-qv-kv2 "" 0 "$LORA"
BETA=0.04 run grpo-full-beta-gc "--full" 1 "$FULL"
# The generation round as the peak: 32 sequences of 256 prompt tokens through the prefill, trained in four
# checkpointed micro-batches of 8; and long completions (the cache and each token's sampling grow with them).
B=4 G=8 P=256 C=16 GA=4 run grpo-lora-qv-prefill "" 1 "$LORA"
B=2 G=4 P=16 C=192 run grpo-lora-qv-long "" 1 "$LORA"

# The coverage table follows the data (ONLY= leaves the data alone).
if [[ -z ${ONLY:-} ]]; then "$here/coverage.sh"; fi

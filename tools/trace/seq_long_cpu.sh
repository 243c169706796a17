#!/usr/bin/env bash
# Regenerates crates/peakplan-core/tests/data/traced/sequences_long.csv and its sequences/long-*.csv and .lens: one
# long run whose batches vary in length, for the core test `traced_long_run_replays_as_the_engine`. ms-swift's
# benchmark runs (measured.csv's swift-* rows) train one epoch of cls-fudan-news-zh at batch size 1, dropping the
# samples longer than L (`truncation_strategy='delete'`); this draws 150 lengths from that dataset's stated
# statistics (3,234.4 +- 2,547.5 tokens, at least 91), keeping those within L = 1,024, with a fixed seed, and
# runs them in order (hf_step.py --lens) at Qwen-1.8B's widths and vocabulary (two layers, LoRA on q and v,
# checkpointing on, as swift's runs), matrix products skipped (memtrace.SkipMatmuls). Needs the Python of
# hf_cpu.sh; about 3 minutes.
source "$(dirname "$0")/lib.sh"
out="$data/sequences_long.csv"
dir="$data/sequences"
mkdir -p "$dir"
H=2048 I=5504 NH=16 KV=16 V=151936 B=1 S=1024 LAYERS=2 STEPS=150
id="long-swift-lora-qv-gc-L$LAYERS"
lens=$("$py" - "$STEPS" "$S" <<'PY'
import random, sys
steps, cap = int(sys.argv[1]), int(sys.argv[2])
random.seed(7)
out = []
while len(out) < steps:
    n = round(random.gauss(3234.4, 2547.5))
    if 91 <= n <= cap:
        out.append(n)
print(",".join(map(str, out)))
PY
)
echo "$lens" >"$dir/$id.lens"
SKIP_MATMULS=1 SEQUENCE="$dir/$id.csv" SEQUENCE_STEPS=$STEPS total_of hf_step.py "$LAYERS" "$B" "$S" \
  --hidden "$H" --inter "$I" --heads "$NH" --kv "$KV" --vocab "$V" --lens "$lens" --gc >/dev/null
keys="b=$B&s=$S&lens=padded&lmean=3234&lsd=2548&lmax=$S&loss=standard&opt=adamw_torch&fw=hf&gpus=1&gpu=h200-141gb"
keys="$keys&attn=sdpa&method=lora&r=16&targets=q,v&dropout=0&adtype=fp32&gc=1&prec=bf16"
echo "$llama_header" >"$out"
emit "$id,$LAYERS,$H,$I,$NH,$KV,$V,0,$(sequence_peak "$dir/$id.csv"),$keys"

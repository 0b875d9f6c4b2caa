#!/usr/bin/env bash
# mimo's CPU training step against PyTorch eager on the same model, in one
# run: the 22M-parameter language model (hidden 512, 4 layers, 8 heads, FFN
# 1536, vocab 8192, batch 4) at sequence 128, 512 and 2048; one core (both
# pinned, one thread), and two cores (mimo --threads 2, mimo as 2 ranks of
# a DP2 layout, PyTorch with 2 threads). tokens/s over the steps after the
# first, and peak resident memory of the one-core runs.
#
# usage: bench/cpu_vs_pytorch.sh [--build DIR] [--write] [SEQ ...]
#   --write: also write bench/results/cpu-vs-pytorch.md (with the machine,
#   date and commit). PyTorch: Debian's python3-torch (apt install
#   python3-torch), run by /usr/bin/python3; without it only mimo runs.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build write=0 seqs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --write) write=1; shift ;;
    *) seqs+=("$1"); shift ;;
  esac
done
[ ${#seqs[@]} -gt 0 ] || seqs=(128 512 2048)
bin=$build/bin
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python=/usr/bin/python3
torch=0
$python -c "import torch" 2>/dev/null && torch=1
one=(taskset -c 0)
two=(taskset -c 0,1)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 # PyTorch's own pools

rate() { # metrics file -> mean tokens/s over steps 2..
  python3 -c "import json,sys
r=[json.loads(l) for l in open(sys.argv[1])]; r=r[1:] or r
print(round(sum(x['tokens'] for x in r)/sum(x['seconds'] for x in r)))" "$1"
}
peak() { # /usr/bin/time -v output -> peak resident MiB
  awk '/Maximum resident set size/ {printf "%d", $6/1024}' "$1"
}
model() { # seq dp -> model.json
  cat <<EOF
{"version": 1, "name": "lm-22m", "seed": 1234,
 "batch": {"micro_batch_size": 4, "num_microbatches": 1, "seq_length": $1},
 "modules": [{"name": "language", "kind": "language",
   "arch": {"vocab_size": 8192, "hidden_size": 512, "num_layers": 4,
            "num_heads": 8, "ffn_hidden_size": 1536},
   "parallel": {"dp": $2}}],
 "train": {"steps": 4, "lr": 0.001}}
EOF
}
twin() { # threads seq steps -> tokens/s
  $python bench/pytorch_twin.py --threads "$1" --seq "$2" --steps "$3" |
    python3 -c "import json,sys; print(round(json.load(sys.stdin)['tokens_per_s']))"
}

table=$work/table.md
{
  echo "| seq | tokens/step | 1 core: mimo | PyTorch | mimo / PyTorch | peak MiB mimo / PyTorch | 2 cores: mimo --threads 2 | mimo 2 ranks (DP2) | PyTorch 2 threads | best mimo / PyTorch |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
} >"$table"
for seq in "${seqs[@]}"; do
  steps=4
  [ "$seq" -ge 2048 ] && steps=3
  [ "$seq" -le 128 ] && steps=8
  model "$seq" 1 >"$work/m1.json"
  model "$seq" 2 >"$work/m2.json"
  "$bin/mimoc" compile "$work/m1.json" -o "$work/p1.json"
  "$bin/mimoc" compile "$work/m2.json" -o "$work/p2.json"
  /usr/bin/time -v "${one[@]}" "$bin/mimo-run" "$work/p1.json" --device cpu --threads 1 \
    --steps $steps --metrics "$work/a.jsonl" >/dev/null 2>"$work/a.time"
  "${two[@]}" "$bin/mimo-run" "$work/p1.json" --device cpu --threads 2 --steps $steps \
    --metrics "$work/b.jsonl" >/dev/null
  "${two[@]}" "$bin/mimo-run" "$work/p2.json" --device cpu --threads 1 --steps $steps \
    --metrics "$work/c.jsonl" >/dev/null
  a=$(rate "$work/a.jsonl") b=$(rate "$work/b.jsonl") c=$(rate "$work/c.jsonl")
  ta=- tb=- ratio1=- ratio2=- tpeak=-
  if [ $torch = 1 ]; then
    /usr/bin/time -v "${one[@]}" $python bench/pytorch_twin.py --threads 1 --seq "$seq" \
      --steps $steps >"$work/t.json" 2>"$work/t.time"
    ta=$(python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['tokens_per_s']))" "$work/t.json")
    tpeak=$(peak "$work/t.time")
    tb=$("${two[@]}" env OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 bash -c \
      "$(declare -f twin); python=$python; twin 2 $seq $steps")
    ratio1=$(python3 -c "print(f'{$a/$ta:.2f}')")
    ratio2=$(python3 -c "print(f'{max($b,$c)/$tb:.2f}')")
  fi
  echo "| $seq | $((4 * seq)) | $a | $ta | **$ratio1** | $(peak "$work/a.time") / $tpeak | $b | $c | $tb | **$ratio2** |" >>"$table"
done
cat "$table"
if [ $write = 1 ]; then
  mkdir -p bench/results
  {
    echo "# mimo CPU training step vs PyTorch eager"
    echo
    echo "Written by \`bench/cpu_vs_pytorch.sh --write\`; every figure from that one run."
    echo
    echo "- machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(getconf _NPROCESSORS_ONLN) cores"
    echo "- PyTorch: $($python -c 'import torch; print(torch.__version__)' 2>/dev/null || echo absent), eager (attention materialises the S x S scores)"
    echo "- commit: $(git rev-parse --short HEAD), date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- model: language only, hidden 512, 4 layers, 8 heads, FFN 1536, vocab 8192, micro-batch 4; tokens/s averaged over the steps after the first"
    echo "- 1 core: \`taskset -c 0\`, one thread each; 2 cores: \`taskset -c 0,1\`"
    echo
    cat "$table"
  } >bench/results/cpu-vs-pytorch.md
  echo "wrote bench/results/cpu-vs-pytorch.md"
fi

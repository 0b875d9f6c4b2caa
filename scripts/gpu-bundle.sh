#!/usr/bin/env bash
# Prepares, on a development machine, what a GPU machine (only the CUDA
# toolkit, cmake, ninja, python3) needs for scripts/gpu-check.sh and does
# not have: the nlohmann-json header, every example compiled to a plan by
# mimoc, and the commit. Writes .gpu-bundle/ (ignored by git; a few MiB),
# which travels with the tree to the GPU machine.
# usage: scripts/gpu-bundle.sh   (after scripts/setup.sh has built build/)
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=.gpu-bundle
rm -rf "$bundle"
mkdir -p "$bundle/include" "$bundle/plans"
cp -r /usr/include/nlohmann "$bundle/include/"
for model in examples/*.json; do
  name=$(basename "$model" .json)
  build/bin/mimoc compile "$model" -o "$bundle/plans/$name.plan.json"
done
# Two modules whose head dimensions (72, 112) both take the generic fp32
# attention kernel past 48 KiB of shared memory, their rank threads on one
# GPU: the kernel's opt-in must not be lowered by one while the other
# launches (the examples phase runs it like an example).
python3 - "$bundle/heads-72-112.json" <<'PY'
import json, sys
model = json.load(open("examples/vlm-fan-in.json"))
model["name"] = "heads-72-112"
model["modules"][0]["arch"].update(hidden_size=288, num_heads=4, ffn_hidden_size=576)
model["modules"][1]["arch"].update(hidden_size=448, num_heads=4, ffn_hidden_size=896)
json.dump(model, open(sys.argv[1], "w"), indent=1)
PY
build/bin/mimoc compile -q "$bundle/heads-72-112.json" -o "$bundle/plans/heads-72-112.plan.json"
# A vision tower frozen whole (forward only: no backward, no gradient
# messages) beside a language model with its first layer frozen (no
# weight-gradient GEMMs there); the LLaVA examples cover a frozen body.
python3 - "$bundle/frozen-tower.json" <<'PY'
import json, sys
model = json.load(open("examples/vlm-colocated-pp2.json"))
model["name"] = "frozen-tower"
model["modules"][0]["freeze"] = True
model["modules"][1]["freeze"] = ["layers.0"]
json.dump(model, open(sys.argv[1], "w"), indent=1)
PY
build/bin/mimoc compile -q "$bundle/frozen-tower.json" -o "$bundle/plans/frozen-tower.plan.json"
# A sparse tower (docs/model.md "Mixture of experts") beside moe-vlm's
# sparse language model: the tower's experts split over its DP2 (ep 2),
# a gated shared expert, images missing from some lanes; the language
# model's experts whole on each TP rank (etp 1), each on half the rows.
python3 - "$bundle/moe-tower.json" <<'PY'
import json, sys
model = json.load(open("examples/moe-vlm.json"))
model["name"] = "moe-tower"
tower = model["modules"][0]
tower["arch"]["moe"] = {"num_experts": 4, "top_k": 2, "expert_ffn_hidden_size": 128,
                        "shared_expert_ffn_hidden_size": 64, "layers": [1]}
tower["parallel"]["ep"] = 2
model["modules"][1]["parallel"]["etp"] = 1
json.dump(model, open(sys.argv[1], "w"), indent=1)
PY
build/bin/mimoc compile -q "$bundle/moe-tower.json" -o "$bundle/plans/moe-tower.plan.json"
# A Llama 3-like language model (docs/model-json.md): TP2 splitting two
# key/value groups with SP, CP2 gathering the groups, rope_theta 500000
# with the llama3 rope_scaling, norm_eps 1e-6.
python3 - "$bundle/llama3-gqa.json" <<'PY'
import json, sys
model = json.load(open("examples/lm-cp2-sp.json"))
model["name"] = "llama3-gqa"
for module in model["modules"]:
    module["arch"]["norm_eps"] = 1e-6
    if module["kind"] == "language":
        module["arch"].update(num_query_groups=2, rope_theta=500000.0,
                              rope_scaling={"type": "llama3", "factor": 8.0,
                                            "low_freq_factor": 1.0,
                                            "high_freq_factor": 4.0,
                                            "original_max_position_embeddings": 64})
json.dump(model, open(sys.argv[1], "w"), indent=1)
PY
build/bin/mimoc compile -q "$bundle/llama3-gqa.json" -o "$bundle/plans/llama3-gqa.plan.json"
# The pretrained LLaVA example (docs/pretrained.md): its Hugging Face
# folders (Llama 3.1 and SigLIP, random weights) travel in the bundle, and
# the plan names them relative to the repository's root, where the
# examples phase runs mimo-run.
/usr/bin/python3 examples/pretrained/make-folders.py "$bundle/hf" >/dev/null
python3 - "$bundle/llava-siglip.json" <<'PY'
import json, sys
model = json.load(open("examples/pretrained/llava-siglip.json"))
for module in model["modules"]:
    init = module.get("init")
    if init:
        init["from"] = "../.gpu-bundle/hf/" + init["from"].split("/")[-1]
json.dump(model, open(sys.argv[1], "w"), indent=1)
PY
build/bin/mimoc compile -q "$bundle/llava-siglip.json" -o "$bundle/plans/llava-siglip.plan.json"
sed -i "s#\"$PWD/#\"#g" "$bundle/plans/llava-siglip.plan.json"
# The hf phase's exported folders (a LLaVA, a Qwen2) and mimo's loss on a
# batch from each (bench/hf_client.py prepare: mimo trains, exports, and
# starts again from the export here; transformers loads it there).
/usr/bin/python3 bench/hf_client.py prepare "$bundle/hf-client" >/dev/null
# The nccl check's one-rank plan, and the overlap benchmark's layouts.
mkdir -p "$bundle/nccl"
python3 - "$bundle/nccl/single.json" <<'PY'
import json, sys
model = json.load(open("examples/vlm-fan-in.json"))
for module in model["modules"]:
    module["parallel"] = {}
json.dump(model, open(sys.argv[1], "w"), indent=1)
PY
build/bin/mimoc compile -q "$bundle/nccl/single.json" -o "$bundle/nccl/single.plan.json"
python3 bench/overlap.py --write-plans "$bundle/overlap"
# The ~1.3B model of bench/train_1b.py, and its memory plan.
mkdir -p "$bundle/1b"
build/bin/mimoc compile -q bench/models/lm-1b.json -o "$bundle/1b/lm-1b.plan.json"
build/bin/mimoc explain "$bundle/1b/lm-1b.plan.json" --format json >"$bundle/1b/explain.json"
# The same with recomputation (bench/recompute_gpu.sh): selective and full.
for mode in selective full; do
  python3 - "$mode" "$bundle/1b/lm-1b-$mode.json" <<'PY'
import json, sys
model = json.load(open("bench/models/lm-1b.json"))
model["modules"][0]["recompute"] = sys.argv[1]
json.dump(model, open(sys.argv[2], "w"), indent=1)
PY
  build/bin/mimoc compile -q "$bundle/1b/lm-1b-$mode.json" -o "$bundle/1b/lm-1b-$mode.plan.json"
done
dirty=$(git status --porcelain --untracked-files=no | grep -q . && echo "+uncommitted" || true)
echo "$(git rev-parse --short HEAD)$dirty" >"$bundle/commit"
echo "gpu-bundle: $(du -sh "$bundle" | cut -f1) in $bundle (carry it to the GPU machine)"

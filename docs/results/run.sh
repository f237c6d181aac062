#!/usr/bin/env bash
# Reproduces the committed evaluation reports in docs/results/ (real inference with the embedded
# LLMs on CPU, plus the SIMULATED hosted family). Run from the repository root after `make install`.
# Sample sizes are chosen to fit CPU time: see each report's split line.
set -euo pipefail
ENTITIES=smollm2,gemma3,sim:confident,sim:conservative,sim:specialist
EPS=0.5,1,2,inf
for protocol in paper heldout; do
  .venv/bin/fedcd evaluate --dataset frcsub --protocol "$protocol" --entities "$ENTITIES" --epsilons "$EPS" \
    --max-students 150 --seed 0 --out "docs/results/frcsub-$protocol"
  .venv/bin/fedcd evaluate --dataset assist0910 --protocol "$protocol" --entities "$ENTITIES" --epsilons "$EPS" \
    --max-students 150 --max-items 30 --seed 0 --out "docs/results/assist0910-$protocol"
done

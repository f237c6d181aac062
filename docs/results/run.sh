#!/usr/bin/env bash
# Reproduces the committed evaluation reports in docs/results/. Run from the repository root after `make install`.
# Sample sizes are chosen to fit CPU time: see each report's split line and wall time.
# The served rows follow the server's defaults (Settings); the committed runs used these:
set -euo pipefail
export FEDCD_DEFAULT_MECHANISM=piecewise FEDCD_DEFAULT_EPSILON=32 FEDCD_SENSITIVITY=assessed \
  FEDCD_DEFAULT_CALIBRATION_METHOD=stacking
SIM=sim:confident,sim:conservative,sim:specialist   # SIMULATED hosted family (not LLMs); local-fed joins by itself
EPS=0.5,1,2,inf
# Held-out protocol, every student of each dataset (ASSIST0910: 2,380 students in 10-20 minutes on 2 shared cores).
.venv/bin/fedcd evaluate --dataset frcsub --protocol heldout --entities "$SIM" --epsilons "$EPS" --seed 0 \
  --out docs/results/frcsub-heldout
.venv/bin/fedcd evaluate --dataset assist0910 --protocol heldout --entities "$SIM" --epsilons "$EPS" --seed 0 \
  --out docs/results/assist0910-heldout
# The same FrcSub run with one more served row measured through a fresh gateway: upload, train, calibrate, diagnose
# over HTTP (issue 21: within 0.01 AUC of the in-process served row).
.venv/bin/fedcd evaluate --dataset frcsub --protocol heldout --entities "$SIM" --epsilons "$EPS" --seed 0 \
  --served-via-api --out docs/results/frcsub-heldout-via-api
# What training buys local-fed (v2): untrained / 1 round / trained, centralized / federated, DP ε 1, 2, 8, v1,
# against IRT, DINA and NCDM on the same split (no served defaults involved).
for dataset in frcsub assist0910; do
  .venv/bin/fedcd evaluate --dataset "$dataset" --local-fed-ablation --seed 0 --out "docs/results/local-fed-ablation/$dataset"
done
# The same with Δ = K (all 110 concepts) for the served noise.
FEDCD_SENSITIVITY=paper .venv/bin/fedcd evaluate --dataset assist0910 --protocol heldout --entities "$SIM" \
  --epsilons 2,inf --seed 0 --out docs/results/assist0910-heldout-sensitivity-paper
# Simulated protocol on FrcSub's Q-matrix (500 DINA- and 500 IRT-generated students, oracle ceiling alongside).
.venv/bin/fedcd evaluate --dataset frcsub --protocol simulated --entities "$SIM" --epsilons "$EPS" --seed 0 \
  --n-simulated 500 --out docs/results/frcsub-simulated
# The same held-out run with the embedded LLMs (real inference on CPU, slow: 150 students).
.venv/bin/fedcd evaluate --dataset frcsub --protocol heldout --entities "smollm2,gemma3,$SIM" --epsilons "$EPS" \
  --seed 0 --max-students 150 --out docs/results/frcsub-heldout-llm
# The paper protocol (reports from before the served rows; rerun to refresh them).
for dataset in frcsub assist0910; do
  extra=$([ "$dataset" = assist0910 ] && echo "--max-items 30" || true)
  .venv/bin/fedcd evaluate --dataset "$dataset" --protocol paper --entities "smollm2,gemma3,$SIM" --epsilons "$EPS" \
    --max-students 150 $extra --seed 0 --out "docs/results/$dataset-paper"
done
# Cost of the federation: all vs selective (tiers), every student (FrcSub 30 s, ASSIST0910 about 17 minutes).
.venv/bin/fedcd bench cost --dataset frcsub --thresholds 0.7,0.75,0.78,0.8,0.81,0.82,0.83,0.84,0.85,0.9 --seed 0 \
  --out docs/results/cost/frcsub
.venv/bin/fedcd bench cost --dataset assist0910 --thresholds 0.7,0.75,0.8,0.85,0.875,0.9,0.925,0.95 --seed 0 \
  --out docs/results/cost/assist0910
# The same with the embedded LLMs in tier 0 (real CPU inference): 60 FrcSub students, about 5 minutes.
.venv/bin/fedcd bench cost --dataset frcsub --max-students 60 --embedded --thresholds 0.8,0.9 --seed 0 \
  --out docs/results/cost/frcsub-embedded

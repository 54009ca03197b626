#!/usr/bin/env bash
# One command on a GPU machine: train a ~1B-parameter model for 30 steps in bf16 with cuDNN flash
# attention, FSDP over every local GPU, and print tokens/s and MFU against the GPU's dense bf16
# peak from conf/hardware/*.yaml (target >= 45% on an H100/H200). Details: benchmarks/gpu_check.py.
#
#   bash benchmarks/gpu_check.sh                    # the check (needs an NVIDIA GPU)
#   bash benchmarks/gpu_check.sh --dry-run [--json OUT.json]   # CPU only: train nothing (below)
#   GPU_CHECK_INSTALL=1 bash benchmarks/gpu_check.sh  # pip-install the CUDA build of JAX first
#   bash benchmarks/gpu_check.sh --steps 50 --per-gpu-batch 4 model.remat=true   # other settings
#
# Second row (issue 31, packed runs): 4 LR variants of a ~20M-parameter model (d_model 512, 6
# layers of 8 heads, seq 256, bf16, batch 32 x 256 tokens per member) trained as a plain multirun
# through `hydra/launcher=packed`, first with pack=1 (one after another in one process), then
# pack=4 (all four concurrently on the GPU, one program); prints the aggregate MFU of each: the
# members' summed tokens x flops_per_token (summary.json) / the multirun's wall / the GPU's peak
# (summary.json peak_flops_per_device), and the ratio K=4 / K=1. Unmeasured until a GPU is lent.
#
# The dry run (--dry-run or --quick, DRY_RUN=1 or GPU_CHECK_DRY_RUN=1; the test suite runs it)
# needs no GPU: it resolves both rows' configs, writes the first row's report from a synthetic
# summary, and computes the packed row's figures and ratio from 4 synthetic members per K, so every
# command and output file of a GPU run is exercised. `--json OUT.json` collects the figures (on a
# GPU: the first row's gpu_check.json, with the packed row's under "packed_row").
#
# Environment: PYTHON (default python), GPU_CHECK_DRY_RUN=1 (same as --dry-run), GPU_CHECK_STEPS,
# GPU_CHECK_LAYERS, GPU_CHECK_INSTALL=1, GPU_CHECK_PACKED=1|0|only (the packed row: after the
# first row (default), skipped, or alone), GPU_CHECK_PACK_STEPS (default 300). Exit 0 = trained
# and measured, 1 = a run failed, 2 = no usable GPU or a bad config (one `error:` line).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python}

dry=${GPU_CHECK_DRY_RUN:-${DRY_RUN:-}}
json=
prev=
for a in "$@"; do
  [[ $a == --dry-run || $a == --quick ]] && dry=1
  [[ $prev == --json ]] && json=$a
  [[ $a == --json=* ]] && json=${a#--json=}
  prev=$a
done
py_args=("$@")
[[ -n $dry ]] && py_args+=(--dry-run)

if [[ -z $dry ]]; then
  # Fail fast, before importing anything: no driver or no device means no check.
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    echo "error: gpu_check needs an NVIDIA GPU (nvidia-smi is missing or lists no GPU); use --dry-run to check the config on CPU" >&2
    exit 2
  fi
  if [[ -n ${GPU_CHECK_INSTALL:-} ]]; then
    "$PYTHON" -m pip install -e '.[gpu]' 'jax[cuda12]'
  fi
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | sed 's/^/gpu_check: nvidia-smi: /'
fi

# ---- row 2: packed members per GPU -------------------------------------------------------------
packed=${GPU_CHECK_PACKED:-1}
case $packed in 0 | 1 | only) ;; *) echo "error: GPU_CHECK_PACKED must be 1, 0 or only (got $packed)" >&2; exit 2 ;; esac
PACK_LRS=1e-3,2e-3,3e-3,6e-3  # the 4 members: an LR probe
PACK_STEPS=${GPU_CHECK_PACK_STEPS:-300}
PACK_MODEL=(model.d_model=512 model.n_layers=6 model.n_heads=8 model.seq_len=256 model.dtype=bfloat16
  train.batch_size=32 train.micro_batch_size=32 "train.steps=$PACK_STEPS" train.eval_every=0
  train.ckpt_every=0 train.eval_tokens=8192 optim.schedule=constant)

pack_figures() {  # W K t0 t1: K's figures from its members' summary.json files -> W/K<K>.json
  "$PYTHON" - "$@" <<'PY'
import json, pathlib, sys
W, K, t0, t1 = pathlib.Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
runs = [json.loads(p.read_text()) for p in (W / f"K{K}").glob("*/summary.json")]
ok = [s for s in runs if s.get("status") == "completed"]
if len(ok) != 4:
    sys.exit(f"error: gpu_check: packed row K={K}: {len(ok)} of 4 members completed ({[s.get('status') for s in runs]})")
flops = sum(s["tokens"] * s["flops_per_token"] for s in ok)
peak = ok[0]["peak_flops_per_device"]
mfu = flops / (t1 - t0) / peak
packed = sum(bool(s.get("packed_with")) for s in ok)
row = {"K": K, "wall_s": t1 - t0, "aggregate_mfu": mfu, "members_mfu": [s.get("mfu") for s in ok],
       "n_params": ok[0]["n_params"], "packed_members": packed, "peak": peak, "source": ok[0].get("peak_flops_source")}
(W / f"K{K}.json").write_text(json.dumps(row, indent=1) + "\n")
print(f"gpu_check: packed row K={K}: 4 members of {ok[0]['n_params'] / 1e6:.1f}M params ({packed} packed), "
      f"{t1 - t0:.1f} s end to end, aggregate MFU {mfu:.1%}; members' own MFU "
      + ", ".join(f"{m:.1%}" for m in row["members_mfu"] if m is not None))
PY
}

pack_ratio() {  # W: the ratio K=4 / K=1; with --json, the row's figures into that file ("packed_row")
  "$PYTHON" - "$1" "$json" <<'PY'
import json, pathlib, sys
W, out = pathlib.Path(sys.argv[1]), sys.argv[2]
rows = {f"K{k}": json.loads((W / f"K{k}.json").read_text()) for k in (1, 4)}
rows["ratio_K4_over_K1"] = rows["K4"]["aggregate_mfu"] / rows["K1"]["aggregate_mfu"]
print(f"gpu_check: packed row: K=4 / K=1 aggregate MFU {rows['ratio_K4_over_K1']:.2f}x; figures in {W}/K*.json")
if out:
    out = pathlib.Path(out)
    data = json.loads(out.read_text()) if out.is_file() else {}
    out.write_text(json.dumps({**data, "packed_row": rows}, indent=1) + "\n")
PY
}

pack_dry_run() {  # CPU: the row's config resolves; its figures from 4 synthetic members per K
  local W
  W=$(mktemp -d -t gpu_check_pack.XXXX)
  JAX_PLATFORMS=cpu "$PYTHON" - "$W" "${PACK_MODEL[@]}" <<'PY' || return 1
import json, pathlib, sys
sys.path.insert(0, "benchmarks")
from gpu_check import compose
from experiments.train.config import resolve_config
spec = resolve_config(compose(sys.argv[2:]), n_devices=1)
print(f"gpu_check: packed row: {spec.n_params / 1e6:.1f}M params, {spec.flops_per_token / 1e6:.0f} MFLOP/token, "
      f"{spec.tokens_per_step:,} tokens/step per member, {spec.steps} steps; config resolves (dry run: nothing trained)")
W = pathlib.Path(sys.argv[1])
for K in (1, 4):  # what a multirun leaves: one directory with a summary.json per member
    for i in range(4):
        d = W / f"K{K}" / f"m{i}"
        d.mkdir(parents=True)
        s = {"status": "completed", "tokens": spec.steps * spec.tokens_per_step, "mfu": 0.1 * K,
             "flops_per_token": spec.flops_per_token, "peak_flops_per_device": 989e12,
             "peak_flops_source": "dry run: synthetic", "n_params": spec.n_params,
             "packed_with": [f"m{j}" for j in range(4)] if K > 1 else None}
        (d / "summary.json").write_text(json.dumps(s))
PY
  # synthetic walls: K=4 trains the same tokens in a third of K=1's time
  local r=0
  pack_figures "$W" 1 0 30 && pack_figures "$W" 4 0 10 && pack_ratio "$W" || r=$?
  rm -rf "$W"
  return $r
}

pack_row() {  # GPU: K = 1 then 4; one line per K, then the ratio
  local W K t0 t1
  W=$(mktemp -d -t gpu_check_pack.XXXX)
  for K in 1 4; do
    t0=$(date +%s.%N)
    "$PYTHON" -m experiments.train -m "optim.lr=$PACK_LRS" hydra/launcher=packed "hydra.launcher.pack=$K" \
      "${PACK_MODEL[@]}" "hydra.sweep.dir=$W/K$K" >"$W/K$K.log" 2>&1 ||
      { echo "error: gpu_check: packed row K=$K failed: $(tail -1 "$W/K$K.log") (log $W/K$K.log)" >&2; return 1; }
    t1=$(date +%s.%N)
    pack_figures "$W" "$K" "$t0" "$t1" || return 1
  done
  pack_ratio "$W"
}

rc=0
if [[ $packed != only ]]; then
  "$PYTHON" benchmarks/gpu_check.py "${py_args[@]}" || rc=$?
fi
if [[ $packed == 0 || $rc == 2 ]]; then  # skipped, or no usable GPU / a bad config: stop here
  exit $rc
elif [[ -n $dry ]]; then
  pack_dry_run || rc=2
else
  pack_row || rc=1
fi
exit $rc

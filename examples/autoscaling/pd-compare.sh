#!/usr/bin/env bash
# The P/D worked example of docs/autoscaling.md: one simulated day of
# long-prompt traffic (20 req/s on average, 10x from midnight to noon,
# prompts of ~2 000 tokens, answers of ~150) served by Llama-3.1-8B on
# H100s under an SLO of 2 s TTFT and 15 ms ITL, by a fixed P/D fleet, P/D
# pools each sized by Dynamo's SLA planner, and two autoscaled aggregated
# fleets. Writes each run's JSON report to OUT (default pd-autoscaling-out/)
# and the P/D planner's timeline plot, and prints the cost/SLO table with
# each pool's cost. About 30 s per fleet.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)/pd"
out="${1:-pd-autoscaling-out}"
blis="${BLIS:-$here/../../../target/release/blis}"
mkdir -p "$out"
for fleet in pd-fixed pd-planner agg-planner agg-hpa; do
  plot=()
  [ "$fleet" = pd-planner ] && plot=(--plot-timeline "$out/$fleet.svg")
  "$blis" run --model meta-llama/llama-3.1-8b-instruct --workload-spec "$here/diurnal-long-prompts.yaml" \
    --policy-config "$here/$fleet.yaml" --quiet --output "$out/$fleet.json" "${plot[@]}"
done
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
print(f"{'fleet':<13}{'GPU-hours':>10}{'cost $':>8}  {'per pool $':<22}{'SLO met':>8}{'TTFT p99':>10}{'TPOT p99':>10}{'ups/downs':>11}")
for fleet in ["pd-fixed", "pd-planner", "agg-planner", "agg-hpa"]:
    r = json.load(open(f"{out}/{fleet}.json"))
    a, l = r["cluster"]["autoscaling"], r["latency_ms"]
    pools = ", ".join(f"{p['name']} {p['cost']:.0f}" for p in a["pools"])
    print(f"{fleet:<13}{a['gpu_hours']:>10.1f}{a['cost']:>8.0f}  {pools:<22}{100 * r['cluster']['goodput']['slo_attainment']:>7.2f}%"
          f"{l['ttft']['p99']:>8.0f}ms{l['tpot']['p99']:>8.1f}ms{str(a['scale_ups']) + '/' + str(a['scale_downs']):>11}")
PY

#!/usr/bin/env bash
# The local demo on the embedded quickstart: render it, then have the real promtool and amtool check
# the rules and show where each severity is routed. The live demo (simulated GPUs, a tiny trainer, a
# real Prometheus and Alertmanager, injected faults) arrives with the exporter.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${TRAINGUARD_VENV:-.venv}/bin"
out="${1:-out/demo}"
echo "== trainguard render -f examples/quickstart.yaml --format prometheus -o $out"
"$BIN/trainguard" render -f examples/quickstart.yaml --format prometheus -o "$out"
if command -v promtool >/dev/null; then
  echo "== promtool check rules $out/rules.yml"
  promtool check rules "$out/rules.yml"
fi
if command -v amtool >/dev/null; then
  echo "== amtool check-config $out/alertmanager.yml"
  amtool check-config "$out/alertmanager.yml"
  echo "== routes (quiet hours are on in the quickstart, so a receiver with a day and a night route shows twice)"
  for sev in P0 P1 P2 P3; do
    printf '== a %s alert of ml/llama-pretrain goes to: ' "$sev"
    amtool config routes test --config.file="$out/alertmanager.yml" \
      namespace=ml training_job=llama-pretrain severity="$sev" alertname=Demo 2>/dev/null
  done
fi
echo "== Kubernetes objects (trainguard render -f examples/quickstart.yaml):"
"$BIN/trainguard" render -f examples/quickstart.yaml | grep -E '^(kind|  name):' | paste - - | sed 's/^/   /'

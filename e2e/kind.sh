#!/usr/bin/env bash
# Runs the e2e suite on a kind cluster (a laptop with Docker), instead of the local control plane.
#   e2e/kind.sh            create the cluster "trainguard-e2e" if needed, run the suite
#   KEEP=1 e2e/kind.sh     leave the cluster running afterwards
# The operator runs on this machine, so the apiserver inside kind must reach its webhook on the
# Docker bridge; TRAINGUARD_E2E_WEBHOOK_HOST overrides the address found below. Fake GPU nodes are
# registered in the cluster by the harness, exactly as on the local control plane.
set -euo pipefail
cd "$(dirname "$0")/.."
NAME="${KIND_CLUSTER:-trainguard-e2e}"
command -v kind >/dev/null || { echo "kind is not installed: https://kind.sigs.k8s.io" >&2; exit 2; }
if ! kind get clusters | grep -qx "$NAME"; then
  kind create cluster --name "$NAME" --wait 120s
fi
kubeconfig="$(mktemp)"
kind get kubeconfig --name "$NAME" > "$kubeconfig"
host="${TRAINGUARD_E2E_WEBHOOK_HOST:-$(docker network inspect kind -f '{{(index .IPAM.Config 0).Gateway}}')}"
e2e/controlplane/build.sh crds     # prometheus-operator's CRDs, generated from the pinned module
status=0
TRAINGUARD_E2E_KUBECONFIG="$kubeconfig" TRAINGUARD_E2E_WEBHOOK_HOST="$host" \
  "${TRAINGUARD_VENV:-.venv}/bin/python" -m pytest e2e "$@" || status=$?
rm -f "$kubeconfig"
[ -n "${KEEP:-}" ] || kind delete cluster --name "$NAME"
exit "$status"

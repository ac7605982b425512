#!/usr/bin/env bash
# Builds the local control plane's binaries from the Go module proxy and caches them by version.
#
# Only the first run on a machine pays for the build: every binary lands in
#   $TRAINGUARD_E2E_CACHE/bin/<name>-<version>   (default ~/.cache/trainguard-e2e)
# and is reused while that file exists. Each component builds in a Go module of its own, because
# k8s.io/kubernetes, etcd and helm pin different versions of the same libraries.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-3.6.16}"
HELM_VERSION="${HELM_VERSION:-3.22.0}"
PROM_OPERATOR_VERSION="${PROM_OPERATOR_VERSION:-0.93.1}"
# the CRDs installed: what trainguard renders (rules, routes, pod and service monitors), what e2e runs
# through the real operator (a Prometheus and an Alertmanager) and the Probes its Prometheus controller
# cannot start without; the operator skips the other kinds it finds missing
PROM_OPERATOR_KINDS="prometheusrules alertmanagerconfigs podmonitors servicemonitors probes prometheuses alertmanagers"
PROM_OPERATOR_KINDS_REV=r5  # a new list needs a new revision: a cached folder holds the old one
# e2e's Prometheus: the release Debian ships (the integration tests run Debian's), built from its
# module because Debian's leaves Kubernetes service discovery out, which prometheus-operator's scrape
# configurations use
PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-2.42.0}"
# the "upstream" toolchain that the rule and routing tests run on beside Debian's 2.42 and 0.25 (`build.sh
# upstream`): the Prometheus 3 and Alertmanager that users run today, each with its command-line tool
PROMETHEUS3_VERSION="${PROMETHEUS3_VERSION:-3.16.0}"
ALERTMANAGER_VERSION="${ALERTMANAGER_VERSION:-0.35.0}"
# the newest release whose module Go 1.26 accepts (later ones need a newer Go)
VICTORIA_METRICS_VERSION="${VICTORIA_METRICS_VERSION:-1.151.0}"
NODE_EXPORTER_VERSION="${NODE_EXPORTER_VERSION:-1.12.1}"
# the distributed rule and storage engine of e2e/test_distributed_rules.py (`build.sh thanos`): Receive,
# Query and Ruler are one binary. The VictoriaMetrics cluster's -cluster tags are not on the proxy here.
THANOS_VERSION="${THANOS_VERSION:-0.40.1}"
# the training controllers of e2e/test_training_controllers.py (`build.sh controllers`)
JOBSET_VERSION="${JOBSET_VERSION:-0.11.1}"
KUEUE_VERSION="${KUEUE_VERSION:-0.17.0}"
TRAINER_VERSION="${TRAINER_VERSION:-2.2.0}"
TRAINING_OPERATOR_VERSION="${TRAINING_OPERATOR_VERSION:-1.9.3}"

CACHE="${TRAINGUARD_E2E_CACHE:-$HOME/.cache/trainguard-e2e}"
BIN="$CACHE/bin"
WORK="$CACHE/build"
[ "${1:-all}" = cached ] || mkdir -p "$BIN" "$WORK"  # `cached` only looks

export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
: "${GOMAXPROCS:=$(nproc)}"

log() { printf '[build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

have() {  # have NAME VERSION: the cached binary exists
  [ -x "$BIN/$1-$2" ]
}

locked() {  # locked NAME FUNCTION: one build of NAME at a time on this machine. .ci/run builds in the
  # background while make test runs, and make test asks for the same binaries: it waits for them here.
  local fd
  exec {fd}>"$BIN/.$1.lock"
  if ! flock -n "$fd"; then
    log "$1: another build of it is running; waiting for it"
    flock "$fd"
  fi
  "$2"
  exec {fd}>&-
}

link_current() {  # stable names for the harness: bin/current/<name> -> ../<name>-<version>
  mkdir -p "$BIN/current"
  ln -sfn "../$1-$2" "$BIN/current/$1"
}

build_kubernetes() {
  local v="$K8S_VERSION" minor names=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
  local missing=0 n
  for n in "${names[@]}"; do have "$n" "$v" || missing=1; done
  if [ "$missing" = 0 ]; then
    log "kubernetes v$v: cached"
  else
    local start=$SECONDS dir="$WORK/kubernetes-$v"
    mkdir -p "$dir"
    log "kubernetes v$v: resolving k8s.io/kubernetes and its staging modules"
    local modfile
    modfile=$(go mod download -json "k8s.io/kubernetes@v$v" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
    minor="${v#*.}"; minor="${minor%%.*}"
    {
      echo "module trainguard.io/e2e/kubernetes"
      echo
      echo "go 1.26.0"
      echo
      echo "godebug default=go1.26"
      echo
      echo "require k8s.io/kubernetes v$v"
      echo
      echo "replace ("
      # Every './staging/src/k8s.io/X' replace of the release becomes 'k8s.io/X => k8s.io/X v0.N.M'.
      sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/[a-z0-9-]*#\t\1 => \1 v0.'"${v#*.}"'#p' "$modfile"
      echo ")"
    } > "$dir/go.mod"
    printf 'package main\n' > "$dir/main.go"
    (
      cd "$dir"
      log "kubernetes v$v: downloading modules"
      go get "k8s.io/kubernetes/cmd/kube-apiserver@v$v" >/dev/null 2>&1 || go get "k8s.io/kubernetes/cmd/kube-apiserver@v$v"
      local ld="-s -w -X k8s.io/component-base/version.gitVersion=v$v -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
      local out="$dir/out"
      mkdir -p "$out"
      log "kubernetes v$v: compiling ${names[*]} (the slow part: tens of minutes on 2 cores)"
      go build -trimpath -ldflags "$ld" -o "$out/" \
        k8s.io/kubernetes/cmd/kube-apiserver \
        k8s.io/kubernetes/cmd/kube-controller-manager \
        k8s.io/kubernetes/cmd/kube-scheduler \
        k8s.io/kubernetes/cmd/kubectl
      for n in "${names[@]}"; do mv "$out/$n" "$BIN/$n-$v"; done
    )
    log "kubernetes v$v: built in $((SECONDS - start))s"
  fi
  for n in "${names[@]}"; do link_current "$n" "$v"; done
}

build_etcd() {
  local v="$ETCD_VERSION"
  if have etcd "$v"; then log "etcd v$v: cached"; else
    local start=$SECONDS dir="$WORK/etcd-$v"
    mkdir -p "$dir"
    printf 'module trainguard.io/e2e/etcd\n\ngo 1.26.0\n' > "$dir/go.mod"
    cat > "$dir/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
    (
      cd "$dir"
      log "etcd v$v: downloading modules"
      go get "go.etcd.io/etcd/server/v3@v$v"
      go mod tidy
      log "etcd v$v: compiling"
      go build -trimpath -ldflags "-s -w" -o "$BIN/etcd-$v" .
    )
    log "etcd v$v: built in $((SECONDS - start))s"
  fi
  link_current etcd "$v"
}

go_tool() {  # go_tool NAME VERSION PACKAGE LDFLAGS: `go build` one command of a Go module, in a module of its own
  local name="$1" v="$2" pkg="$3" ldflags="$4"
  if have "$name" "$v"; then log "$name v$v: cached"; else
    local start=$SECONDS dir="$WORK/$name-$v"
    mkdir -p "$dir"
    printf 'module trainguard.io/e2e/%s\n\ngo 1.26.0\n' "${name//[-_]/}" > "$dir/go.mod"
    printf 'package main\n' > "$dir/main.go"
    (
      cd "$dir"
      log "$name v$v: downloading modules"
      go get "$pkg@v$v"
      log "$name v$v: compiling"
      go build -trimpath -ldflags "-s -w $ldflags" -o "$BIN/$name-$v" "$pkg"
    )
    log "$name v$v: built in $((SECONDS - start))s"
  fi
  link_current "$name" "$v"
}

go_controller() {  # go_controller NAME VERSION MODULE PACKAGE LDFLAGS PATH...: a controller manager's binary
  # (go_tool), and the YAML its module ships at each PATH (files or folders: CRDs, webhook
  # configurations, kustomize patches), copied into $CACHE/manifests/NAME-VERSION/ as they are; the
  # harness (e2e/controlplane/controllers.py) rewrites what it needs. bin/current/NAME and
  # manifests/current/NAME are the stable names.
  local name="$1" v="$2" mod="$3" pkg="$4" ldflags="$5"; shift 5
  local dest="$CACHE/manifests/$name-$v"
  go_tool "$name" "$v" "$pkg" "$ldflags"
  if [ ! -d "$dest" ]; then
    local src p
    src=$(go mod download -json "$mod@v$v" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
    rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
    for p in "$@"; do
      mkdir -p "$dest.tmp/$(dirname "$p")"
      cp -r "$src/$p" "$dest.tmp/$p"
    done
    chmod -R u+w "$dest.tmp"  # the module cache is read-only
    mv "$dest.tmp" "$dest"
  fi
  mkdir -p "$CACHE/manifests/current"
  ln -sfn "../$name-$v" "$CACHE/manifests/current/$name"
}

build_jobset() {
  go_controller jobset "$JOBSET_VERSION" sigs.k8s.io/jobset sigs.k8s.io/jobset \
    "-X sigs.k8s.io/jobset/pkg/version.GitVersion=v$JOBSET_VERSION" \
    config/components/crd config/components/webhook
}

build_kueue() {
  go_controller kueue "$KUEUE_VERSION" sigs.k8s.io/kueue sigs.k8s.io/kueue/cmd/kueue \
    "-X sigs.k8s.io/kueue/pkg/version.GitVersion=v$KUEUE_VERSION" \
    config/components/crd config/components/webhook
}

build_trainer() {
  go_controller trainer "$TRAINER_VERSION" github.com/kubeflow/trainer/v2 \
    github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager "" \
    manifests/base/crds manifests/base/webhook manifests/base/runtimes
}

build_training_operator() {
  go_controller training-operator "$TRAINING_OPERATOR_VERSION" github.com/kubeflow/training-operator \
    github.com/kubeflow/training-operator/cmd/training-operator.v1 "" \
    manifests/base/crds manifests/base/webhook
}

build_helm() {
  go_tool helm "$HELM_VERSION" helm.sh/helm/v3/cmd/helm "-X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION"
}

build_victoria_metrics() {
  # VictoriaMetrics single node, the long-term store of tests/integration/test_longterm_storage.py
  go_tool victoria-metrics "$VICTORIA_METRICS_VERSION" github.com/VictoriaMetrics/VictoriaMetrics/app/victoria-metrics \
    "-X github.com/VictoriaMetrics/VictoriaMetrics/lib/buildinfo.Version=victoria-metrics-v$VICTORIA_METRICS_VERSION"
}

build_node_exporter() {
  # node_exporter, what bench/exporter.py compares the trainguard exporter's scrape cost with
  go_tool node_exporter "$NODE_EXPORTER_VERSION" github.com/prometheus/node_exporter \
    "-X github.com/prometheus/common/version.Version=$NODE_EXPORTER_VERSION"
}

build_prometheus() {
  # Prometheus 2.x is module v0.x (2.42.0 is v0.42.0). Built the way upstream's `make plugins` chooses its
  # service discoveries (plugins.yml into plugins/plugins.go), with Kubernetes' alone: 100 s from cold
  # instead of several minutes for every cloud's SDK. Its web UI's assets are not in the module: the API
  # and /graph's fallback page serve.
  local v="$PROMETHEUS_VERSION"
  if have prometheus "$v"; then log "prometheus v$v: cached"; else
    local start=$SECONDS dir="$WORK/prometheus-$v" src
    log "prometheus v$v: downloading its module"
    src=$(go mod download -json "github.com/prometheus/prometheus@v0.${v#2.}" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
    rm -rf "$dir" && cp -r "$src" "$dir" && chmod -R u+w "$dir"
    (
      cd "$dir"
      printf 'package plugins\n\nimport (\n\t// Register kubernetes plugin.\n\t_ "github.com/prometheus/prometheus/discovery/kubernetes"\n)\n' \
        > plugins/plugins.go
      log "prometheus v$v: compiling (Kubernetes service discovery only)"
      go build -trimpath -ldflags "-s -w -X github.com/prometheus/common/version.Version=$v" \
        -o "$BIN/prometheus-$v" ./cmd/prometheus
    )
    log "prometheus v$v: built in $((SECONDS - start))s"
  fi
  link_current prometheus "$v"
}

build_thanos() {
  # Thanos from its module's own tree: its go.mod's replace directives (capnp, gomemcache, kingpin) only
  # hold there. The tags are upstream's release build's (.promu.yml); its React UI ships in the module.
  local v="$THANOS_VERSION"
  if have thanos "$v"; then log "thanos v$v: cached"; else
    local start=$SECONDS dir="$WORK/thanos-$v" src
    log "thanos v$v: downloading its module"
    src=$(go mod download -json "github.com/thanos-io/thanos@v$v" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
    rm -rf "$dir" && cp -r "$src" "$dir" && chmod -R u+w "$dir"
    (
      cd "$dir"
      log "thanos v$v: compiling"
      go build -trimpath -tags netgo,slicelabels \
        -ldflags "-s -w -X github.com/prometheus/common/version.Version=$v" -o "$dir/out/thanos" ./cmd/thanos
      mv out/thanos "$BIN/thanos-$v"
    )
    rm -rf "$dir"
    log "thanos v$v: built in $((SECONDS - start))s"
  fi
  link_current thanos "$v"
}

link_upstream() {  # the upstream toolchain's stable names: toolchains/upstream/<name> -> ../../bin/<name>-<version>
  mkdir -p "$CACHE/toolchains/upstream"
  ln -sfn "../../bin/$1-$2" "$CACHE/toolchains/upstream/$1"
}

build_prometheus3() {
  # Prometheus 3.x is module v0.3xx (3.16.0 is v0.316.0). Its service discoveries are build tags now
  # (plugins/plugin_*.go): remove_all_sd leaves the file and HTTP ones, all that promtool's rule tests and
  # a test's Prometheus use. No web UI assets (builtinassets off): the API serves.
  local v="$PROMETHEUS3_VERSION" minor patch
  minor="${v#3.}"; patch="${minor#*.}"; minor="${minor%%.*}"
  if have prometheus "$v" && have promtool "$v"; then log "prometheus v$v: cached"; else
    local start=$SECONDS dir="$WORK/prometheus-$v" src
    log "prometheus v$v: downloading its module (v0.$((300 + minor)).$patch)"
    src=$(go mod download -json "github.com/prometheus/prometheus@v0.$((300 + minor)).$patch" |
      sed -n 's/.*"Dir": "\(.*\)",/\1/p')
    rm -rf "$dir" && cp -r "$src" "$dir" && chmod -R u+w "$dir"
    (
      cd "$dir"
      export GOWORK=off  # the module's go.work names folders its zip leaves out
      log "prometheus v$v: compiling prometheus and promtool (file and HTTP service discovery only)"
      go build -trimpath -tags netgo,remove_all_sd \
        -ldflags "-s -w -X github.com/prometheus/common/version.Version=$v" -o "$dir/out/" \
        ./cmd/prometheus ./cmd/promtool
      mv out/promtool "$BIN/promtool-$v" && mv out/prometheus "$BIN/prometheus-$v"
    )
    rm -rf "$dir"
    log "prometheus v$v: built in $((SECONDS - start))s"
  fi
  link_upstream prometheus "$v"
  link_upstream promtool "$v"
}

build_alertmanager() {
  # Alertmanager and amtool from their module. The web UI it embeds (ui/app/dist) is built by npm and not
  # in the module: an empty page stands in for it, the API serves.
  local v="$ALERTMANAGER_VERSION"
  if have alertmanager "$v" && have amtool "$v"; then log "alertmanager v$v: cached"; else
    local start=$SECONDS dir="$WORK/alertmanager-$v" src ui
    log "alertmanager v$v: downloading its module"
    src=$(go mod download -json "github.com/prometheus/alertmanager@v$v" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
    rm -rf "$dir" && cp -r "$src" "$dir" && chmod -R u+w "$dir"
    (
      cd "$dir"
      for ui in elm mantine; do
        mkdir -p "ui/app/dist/$ui" && printf '<!doctype html><title>Alertmanager</title>\n' > "ui/app/dist/$ui/index.html"
      done
      log "alertmanager v$v: compiling alertmanager and amtool"
      go build -trimpath -tags netgo \
        -ldflags "-s -w -X github.com/prometheus/common/version.Version=$v" -o "$dir/out/" \
        ./cmd/alertmanager ./cmd/amtool
      mv out/amtool "$BIN/amtool-$v" && mv out/alertmanager "$BIN/alertmanager-$v"
    )
    rm -rf "$dir"
    log "alertmanager v$v: built in $((SECONDS - start))s"
  fi
  link_upstream alertmanager "$v"
  link_upstream amtool "$v"
}

build_prometheus_operator() {
  # prometheus-operator itself (e2e runs the real one: e2e/prometheus_operator.py) and the CRDs it ships,
  # both from its root module. The proxy serves that module at v0.93.1 (the version kube-prometheus-stack
  # 88.5 ships) but not at v0.94.1's or v0.95's nested pkg/client, so v0.93.1 it is. The module's own go.mod
  # points its nested modules (pkg/apis/monitoring, pkg/client) at its source tree, which a module zip
  # leaves out: they come from the proxy at the same version instead.
  local v="$PROM_OPERATOR_VERSION" mod=github.com/prometheus-operator/prometheus-operator
  local dest="$CACHE/crds/prometheus-operator-$v-$PROM_OPERATOR_KINDS_REV"
  if have prometheus-operator "$v" && [ -d "$dest" ]; then
    log "prometheus-operator v$v: cached"
  else
    local start=$SECONDS dir="$WORK/prometheus-operator-$v" src kind
    log "prometheus-operator v$v: downloading its module"
    src=$(go mod download -json "$mod@v$v" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
    rm -rf "$dir" && cp -r "$src" "$dir" && chmod -R u+w "$dir"
    (
      cd "$dir"
      go mod edit -dropreplace "$mod/pkg/apis/monitoring" -dropreplace "$mod/pkg/client" \
        -require "$mod/pkg/apis/monitoring@v$v" -require "$mod/pkg/client@v$v"
      log "prometheus-operator v$v: compiling"
      go build -trimpath -ldflags "-s -w -X github.com/prometheus/common/version.Version=$v" \
        -o "$BIN/prometheus-operator-$v" ./cmd/operator
    )
    rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
    for kind in $PROM_OPERATOR_KINDS; do
      cp "$dir/example/prometheus-operator-crd/monitoring.coreos.com_$kind.yaml" "$dest.tmp/"
    done
    mv "$dest.tmp" "$dest"
    log "prometheus-operator v$v: built in $((SECONDS - start))s"
  fi
  link_current prometheus-operator "$v"
  mkdir -p "$CACHE/crds"
  ln -sfn "$(basename "$dest")" "$CACHE/crds/current"  # the harness's stable name (e2e/controlplane/local.py)
}

all_cached() {  # every binary and CRD folder `all` builds is in the cache (the demo's operator act needs no
  # build then); names what is missing on stderr. Needs neither Go nor the network.
  local missing=() n
  for n in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    have "$n" "$K8S_VERSION" || missing+=("$n-$K8S_VERSION")
  done
  have etcd "$ETCD_VERSION" || missing+=("etcd-$ETCD_VERSION")
  have helm "$HELM_VERSION" || missing+=("helm-$HELM_VERSION")
  have prometheus "$PROMETHEUS_VERSION" || missing+=("prometheus-$PROMETHEUS_VERSION")
  have prometheus-operator "$PROM_OPERATOR_VERSION" || missing+=("prometheus-operator-$PROM_OPERATOR_VERSION")
  [ -d "$CACHE/crds/prometheus-operator-$PROM_OPERATOR_VERSION-$PROM_OPERATOR_KINDS_REV" ] ||
    missing+=("crds/prometheus-operator-$PROM_OPERATOR_VERSION-$PROM_OPERATOR_KINDS_REV")
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "not in $CACHE: ${missing[*]}" >&2
    return 1
  fi
}

what="${1:-all}"
case "$what" in
  cached) all_cached ;;  # builds nothing: exit 0 when `all` would find everything cached
  all)
    locked prometheus-operator build_prometheus_operator
    locked prometheus build_prometheus
    locked etcd build_etcd
    locked kubernetes build_kubernetes
    locked helm build_helm
    ;;
  kubernetes) locked kubernetes build_kubernetes ;;
  etcd) locked etcd build_etcd ;;
  helm) locked helm build_helm ;;
  crds|prometheus-operator) locked prometheus-operator build_prometheus_operator ;;
  prometheus) locked prometheus build_prometheus ;;
  prometheus3) locked "prometheus-$PROMETHEUS3_VERSION" build_prometheus3 ;;
  alertmanager) locked "alertmanager-$ALERTMANAGER_VERSION" build_alertmanager ;;
  upstream)  # the rule and routing tests' second toolchain (tests/toolchains.py), not in all: make unit asks for it
    locked "prometheus-$PROMETHEUS3_VERSION" build_prometheus3
    locked "alertmanager-$ALERTMANAGER_VERSION" build_alertmanager
    ;;
  victoria-metrics) locked victoria-metrics build_victoria_metrics ;;
  node-exporter) locked node_exporter build_node_exporter ;;
  thanos) locked thanos build_thanos ;;  # not in all: e2e/test_distributed_rules.py asks for it
  jobset) locked jobset build_jobset ;;
  kueue) locked kueue build_kueue ;;
  trainer) locked trainer build_trainer ;;
  training-operator) locked training-operator build_training_operator ;;
  controllers)  # not in all, which every e2e process waits for: 16 more CPU-minutes from cold (Kueue 6,
    # Trainer 3.7, JobSet 3.3, training-operator 3.1; ~8 minutes on 2 idle cores). e2e/test_training_controllers.py
    # asks for each one it starts, and .ci/run builds them in the background after all
    locked jobset build_jobset
    locked kueue build_kueue
    locked trainer build_trainer
    locked training-operator build_training_operator
    ;;
  *) echo "usage: $0 [all|cached|kubernetes|etcd|helm|crds|prometheus-operator|prometheus|prometheus3|alertmanager|upstream|victoria-metrics|node-exporter|thanos|controllers|jobset|kueue|trainer|training-operator]" >&2
     exit 2 ;;
esac

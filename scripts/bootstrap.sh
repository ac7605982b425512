#!/usr/bin/env bash
# Prepares a machine for trainguard's tests: a virtualenv with the project and its dev extras, and,
# where this is a Debian-like machine and we are root, the promtool/amtool/Prometheus/Alertmanager
# binaries the integration tests drive. Safe to run again: it skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${TRAINGUARD_VENV:-.venv}"
log() { printf '[bootstrap] %s\n' "$*" >&2; }

if [ ! -x "$VENV/bin/python" ]; then
  log "creating virtualenv $VENV"
  python3 -m venv "$VENV"
fi
stamp="$VENV/.installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  log "installing trainguard with its dev extras into $VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -e '.[dev]'
  touch "$stamp"
fi
# the frameworks the SDK's integrations are tested against: once per venv (about 2 minutes and 6 GB);
# TRAINGUARD_SKIP_FRAMEWORKS=1 leaves them out (tests/sdk_frameworks then skip, unless CI requires them)
frameworks_stamp="$VENV/.frameworks-$(sha256sum pyproject.toml | cut -c1-16)"
# --no-cache-dir: pip's cache would keep another 3 GB of wheels that nothing reads again
if [ -z "${TRAINGUARD_SKIP_FRAMEWORKS:-}" ] && [ ! -f "$frameworks_stamp" ]; then
  free_mib="$(df -Pm "$VENV" | awk 'NR==2 {print $4}')"
  if [ "${free_mib:-0}" -lt 8192 ]; then
    log "only ${free_mib} MiB free on the disk holding $VENV; the frameworks-test extra needs about 6.5 GB"
    log "(torch with its CUDA libraries). Free some space, or set TRAINGUARD_SKIP_FRAMEWORKS=1 to leave them out."
  fi
  log "installing the frameworks-test extra (torch, transformers, accelerate, lightning) into $VENV"
  "$VENV/bin/python" -m pip install -q --no-cache-dir -e '.[frameworks-test]'
  touch "$frameworks_stamp"
fi

for tool in go openssl; do
  command -v "$tool" >/dev/null 2>&1 || log "warning: $tool is not installed; the e2e suite needs it (Go 1.26 builds the control plane)"
done

missing=()
for tool in promtool amtool prometheus prometheus-alertmanager; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing prometheus and prometheus-alertmanager (missing: ${missing[*]})"
    apt-get update -qq -o DPkg::Lock::Timeout=600
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends prometheus prometheus-alertmanager >/dev/null
    # the packages start services; the tests start their own processes
    for svc in prometheus prometheus-alertmanager prometheus-node-exporter; do
      (service "$svc" stop || true) >/dev/null 2>&1
    done
  else
    log "missing ${missing[*]}: the tests that drive them will be skipped."
    log "install them with: sudo apt-get install prometheus prometheus-alertmanager"
  fi
fi

# headless Chromium for the diagnostic report's page test (tests/diagnosis/test_report_chromium.py)
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing chromium (headless, for the report's page test)"
    apt-get update -qq -o DPkg::Lock::Timeout=600
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends chromium >/dev/null
  else
    log "chromium is missing: the report's page test will be skipped (sudo apt-get install chromium)"
  fi
fi

# tmux for `trainguard status --watch`'s terminal test (e2e/test_status_tmux.py)
if ! command -v tmux >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing tmux (for the status command's terminal test)"
    apt-get update -qq -o DPkg::Lock::Timeout=600
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends tmux >/dev/null
  else
    log "tmux is missing: the status command's terminal test will be skipped (sudo apt-get install tmux)"
  fi
fi

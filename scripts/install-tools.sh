#!/usr/bin/env bash
# Installs the real tools the tests run: a pinned Python venv (.venv-tools),
# Debian packages. A second run installs nothing. (cargo-fuzz, which only
# `make fuzz-short`/`make fuzz` need, is installed by scripts/fuzz.sh.)
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv-tools
PY_PINS=(
  "moto[server]==5.2.5"
  "cfn-lint==1.58.0"
  "kubernetes-validate==1.37.0"
  "helm-python-sdk==0.2.2"
  "awscli==1.46.3"
  # The node program's minimum-version check (tests/it/node_program.rs: Python 3.9, AL2023's python3).
  "vermin==1.9.2"
  # The goldens' node-side files against their JSON Schemas (src/node/tests/test_schema.py).
  "jsonschema==4.26.0"
  "PyYAML==6.0.4"
)
APT_PKGS=(shellcheck cloud-init docker-registry)
STAMP="$VENV/.pins"

want_pins="$(printf '%s\n' "${PY_PINS[@]}")"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$want_pins" ]; then
  echo "install-tools: creating $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "${PY_PINS[@]}"
  printf '%s\n' "$want_pins" >"$STAMP"
else
  echo "install-tools: $VENV up to date"
fi

missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "install-tools: apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    # docker-registry's package starts a system service on :5000; tests start their own.
    systemctl disable --now docker-registry >/dev/null 2>&1 || service docker-registry stop >/dev/null 2>&1 || true
  else
    echo "install-tools: missing Debian packages; run: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
else
  echo "install-tools: Debian packages present"
fi

#!/usr/bin/env bash
# deploy/systemd/rayaccel-agent.service passes systemd's own checker with no warning (an unknown
# or misspelt key, a value systemd cannot parse, a missing binary), pointing at the built agent.
# Usage: systemd_unit_test.sh SOURCE_DIR RAYACCEL_BINARY
set -euo pipefail
src=${1:?source dir}
cli=${2:?rayaccel binary}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed "s|/usr/local/bin/rayaccel|$cli|" "$src/deploy/systemd/rayaccel-agent.service" \
  > "$work/rayaccel-agent.service"
grep -q "^ExecStart=$cli serve" "$work/rayaccel-agent.service"
grep -q '^Type=notify$' "$work/rayaccel-agent.service"
if ! out=$(systemd-analyze verify --man=no "$work/rayaccel-agent.service" 2>&1) || [ -n "$out" ]; then
  echo "systemd-analyze verify: ${out:-failed}" >&2
  exit 1
fi
echo "rayaccel-agent.service: verified by $(systemd-analyze --version | head -1)"

#!/usr/bin/env bash
# The Ray tutorials as a user who already ran a local Ray meets them: a ~/.ray/auth_token
# present (Ray 2.60's ray.init() writes one) and no RAY_AUTH_MODE in the environment. They
# must run as rendered all the same.
# Usage: with_auth_token.sh SOURCE_DIR BUILD_DIR DOC.md...
set -euo pipefail
src=${1:?source dir}
build=${2:?build dir}
shift 2
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
mkdir -p "$home/.ray"
head -c 32 /dev/urandom | base64 > "$home/.ray/auth_token"
chmod 600 "$home/.ray/auth_token"
env -u RAY_AUTH_MODE HOME="$home" python3 "$src/tests/docs/doc_examples.py" "$src" "$build" "$@"

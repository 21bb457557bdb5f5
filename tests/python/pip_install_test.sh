#!/bin/sh
# `pip install ./python` as docs/python.md has it, offline: rayaccel installed into a scratch
# prefix, a virtual environment over the system's packages (setuptools, pybind11), the package
# built from python/ against the prefix (pkg-config), then used from outside the source tree.
#   pip_install_test.sh SOURCE_DIR BUILD_DIR
set -eu
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
cp -r "$src/python" "$work/python"  # pip writes build files next to the sources
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" \
  "$work/venv/bin/pip" install --quiet --no-index --no-build-isolation "$work/python"
cd "$work"
"$work/venv/bin/python" - "$src/examples/dgx-h100.json" "$work/prefix" <<'PY'
import sys
import rayaccel, rayaccel.ray
from rayaccel.agent import AgentClient  # the wire's messages were generated at install
assert rayaccel.__file__.startswith(sys.prefix), rayaccel.__file__
with rayaccel.Registry(plugins=["sim"], config={"sim.spec": sys.argv[1]},
                       host_topology=False) as r:
    snap = r.snapshot()
    assert snap.plugin("sim").path.startswith(sys.argv[2]), snap.plugin("sim").path
    gpu = rayaccel.ray.accelerator_manager("GPU", r)
    print("pip install: rayaccel", gpu.get_current_node_num_accelerators(),
          gpu.get_current_node_accelerator_type(), "from", snap.plugin("sim").path)
PY

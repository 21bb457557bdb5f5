#!/usr/bin/python3
"""Every #include under src/ goes down the layers docs/architecture.md lists, and no other way.

    layers_test.py SOURCE_DIR

The table between `<!-- layers: begin -->` and `<!-- layers: end -->` in docs/architecture.md
says which folders each folder may include; a public header counts as its layer's
(rayaccel/snapshot.h is model's, registry.h the registry's, ...). A folder of src/ the table
does not name, or an include it does not allow, fails with the file and line.
"""

import os
import re
import sys

SOURCE = sys.argv[1]
PUBLIC = {  # include/rayaccel headers, by the layer that owns them; None: any layer may
    "plugin.h": None, "abseil_abi.h": None, "log_level.h": None, "snapshot.h": "model",
    "transport.h": "transport", "registry.h": "registry", "host.h": "host", "host.hpp": "host",
}


def table():
    text = open(os.path.join(SOURCE, "docs", "architecture.md")).read()
    block = text.split("<!-- layers: begin -->")[1].split("<!-- layers: end -->")[0]
    allowed = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        folder = cells[0].strip("`").rstrip("/")
        allowed[folder] = set(re.findall(r"`([a-z_]+)/`", cells[2]))
    return allowed


def layer_of(include, folders):
    """The src/ layer an include names, or None for an outside library."""
    first = include.split("/")[0]
    if first == "rayaccel":
        rest = include[len("rayaccel/"):]
        if rest.startswith("v1/"):
            return "rpc"
        if rest not in PUBLIC:
            raise SystemExit(f"rayaccel/{rest}: a public header docs/architecture.md's test "
                             "does not know; add it to PUBLIC with its layer")
        return PUBLIC[rest]
    return first if first in folders or os.path.isdir(os.path.join(SOURCE, "src", first)) \
        else None


def main():
    allowed = table()
    assert allowed, "no layer table in docs/architecture.md"
    src = os.path.join(SOURCE, "src")
    problems = []
    for folder in sorted(os.listdir(src)):
        if not os.path.isdir(os.path.join(src, folder)):
            continue
        if folder not in allowed:
            problems.append(f"src/{folder}/ is not in docs/architecture.md's layer table")
            continue
        for root, _, files in os.walk(os.path.join(src, folder)):
            for name in sorted(files):
                if not name.endswith((".h", ".cc")):
                    continue
                path = os.path.join(root, name)
                for number, line in enumerate(open(path), 1):
                    m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                    if not m:
                        continue
                    target = layer_of(m.group(1), allowed)
                    if target is None or target == folder or target in allowed[folder]:
                        continue
                    problems.append(f"{os.path.relpath(path, SOURCE)}:{number}: {folder}/ "
                                    f"includes {m.group(1)} ({target}/), which it may not "
                                    f"(it may include: {', '.join(sorted(allowed[folder])) or 'nothing'})")
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"{len(allowed)} layers; every include under src/ goes down them")
    return 0


if __name__ == "__main__":
    sys.exit(main())

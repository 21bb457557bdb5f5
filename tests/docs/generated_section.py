#!/usr/bin/python3
"""A section of a document that a command generates holds what the command prints now.

    generated_section.py [--write] DOC NAME -- COMMAND [ARG...]

The section is the lines between `<!-- NAME: begin ... -->` and `<!-- NAME: end -->` in DOC.
When they differ from COMMAND's output, prints the difference and the command that rewrites
the section, and fails; with --write, rewrites it.
"""

import difflib
import os
import shlex
import subprocess
import sys


def main(argv):
    write = argv[:1] == ["--write"]
    if write:
        argv = argv[1:]
    if len(argv) < 4 or argv[2] != "--":
        sys.exit(__doc__)
    doc, name, command = argv[0], argv[1], argv[3:]
    with open(doc) as f:
        lines = f.read().splitlines(keepends=True)
    begin = [i for i, line in enumerate(lines) if line.startswith(f"<!-- {name}: begin")]
    end = [i for i, line in enumerate(lines) if line.rstrip("\n") == f"<!-- {name}: end -->"]
    if len(begin) != 1 or len(end) != 1 or end[0] < begin[0]:
        sys.exit(f"{doc}: {len(begin)} `<!-- {name}: begin ... -->` and {len(end)} "
                 f"`<!-- {name}: end -->` markers, not one of each in that order")
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"{shlex.join(command)} failed (exit status {run.returncode}):\n{run.stderr}")
    now = lines[begin[0] + 1:end[0]]
    want = run.stdout.splitlines(keepends=True)
    if now == want:
        print(f"{doc}: the {name} section is what `{shlex.join(command)}` prints")
        return 0
    if write:
        with open(doc, "w") as f:
            f.writelines(lines[:begin[0] + 1] + want + lines[end[0]:])
        print(f"{doc}: the {name} section rewritten from `{shlex.join(command)}`")
        return 0
    sys.stdout.writelines(difflib.unified_diff(
        now, want, f"{doc} ({name} section)", shlex.join(command)))
    rewrite = ["python3", os.path.abspath(__file__), "--write", doc, name, "--"] + command
    print(f"\n{doc}: the {name} section differs from what the command prints (above: - the "
          f"document, + the command). To rewrite the section:\n  {shlex.join(rewrite)}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

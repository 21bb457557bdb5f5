#!/usr/bin/env python3
"""Runs the examples of README.md and docs/*.md and checks their output (docs/README of tests).

Every `$ ` line in a fenced code block is a command; a line ending in a backslash continues it.
The lines after it, up to the next `$ ` line or the end of the block, are its output as the doc
shows it, compared with what the command prints on stdout (stderr too where the block says so):

  - exactly, line by line (trailing spaces aside), when the doc shows it exactly;
  - a line `...` stands for any number of lines, and `...` inside a line for any text (such a
    line is compared with runs of spaces taken as one: table columns widen with what is elided);
  - no lines shown: the command must succeed, and its output is not compared.

A block is run in one bash, in order, from the source folder, with the build's bin/ first on
PATH (`build/bin/` in a command means the build folder being tested). Each command runs in a
shell of its own, except those that change the reader's shell (`. FILE`, `source`, `export`,
`cd`, `unset`), which run in the block's, so that the commands after them see the change. A command ending in `&`
runs in the background, its output discarded; what a block started is stopped at its end. An
HTML comment right before a block says more, one directive per line:

  <!-- doc-test
  skip: WHY                 not run (it needs hardware, Ray, or another machine): WHY is printed
  replace: OLD => NEW       in the commands and the output shown; NEW may use $TMP (a fresh
                            folder per document), $SRC and $BUILD
  file: NAME                this block is not run: its text is written to $TMP/NAME, for the
                            blocks after it (a sample spec the doc then loads)
  setup: COMMAND            run first, as written ($TMP, $SRC, $BUILD set), its output shown
                            only when it fails (the files the block expects)
  exit: N                   the exit status of the block's last command (default 0, all)
  stderr: shown             the output shown is stdout and stderr together
  needs: python-module      skipped, saying so, when the build has no Python module (a
                            sanitizer build does not make one)
  -->

Relative links in every document must name files that exist, and so must the repository paths
the documents name in backticks (`src/...`, `docs/...`, `examples/...`, and the like).

Usage: doc_examples.py SOURCE_DIR BUILD_DIR [FILE.md ...]
Exit status 0 when every example and link holds; 1 with a report of each that does not.
"""

import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

COMMAND_TIMEOUT_S = 60
PATH_ROOTS = ("bench/", "cmake/", "deploy/", "docs/", "examples/", "include/", "plugins/",
              "proto/", "src/", "tests/")


class Example:
    def __init__(self, doc, line, command, expected):
        self.doc, self.line, self.command, self.expected = doc, line, command, expected


class Block:
    def __init__(self, doc, line):
        self.doc, self.line = doc, line
        self.examples = []
        self.skip = None
        self.replace = []
        self.setup = []
        self.exit = 0
        self.stderr_shown = False
        self.file = None
        self.needs_python = False
        self.text = ""


def parse_directives(comment, block, problems):
    for raw in comment.splitlines():
        text = raw.strip()
        if not text or text in ("<!-- doc-test", "-->"):
            continue
        key, _, value = text.partition(":")
        value = value.strip()
        if key == "skip":
            block.skip = value or "(no reason given)"
        elif key == "replace" and "=>" in value:
            old, new = (v.strip() for v in value.split("=>", 1))
            block.replace.append((old, new))
        elif key == "setup":
            block.setup.append(value)
        elif key == "exit" and value.isdigit():
            block.exit = int(value)
        elif key == "stderr" and value == "shown":
            block.stderr_shown = True
        elif key == "file" and value and "/" not in value:
            block.file = value
        elif key == "needs" and value == "python-module":
            block.needs_python = True
        else:
            problems.append(f"{block.doc}:{block.line}: unknown doc-test directive: {text}")


def parse(doc, text, problems):
    """The fenced blocks of `doc` that hold `$ ` commands."""
    blocks = []
    lines = text.splitlines()
    i = 0
    pending_comment = None
    while i < len(lines):
        line = lines[i]
        if line.startswith("<!-- doc-test"):
            start = i
            while i < len(lines) and "-->" not in lines[i]:
                i += 1
            pending_comment = "\n".join(lines[start:i + 1])
            i += 1
            continue
        if line.startswith("```"):
            block = Block(doc, i + 1)
            if pending_comment is not None:
                parse_directives(pending_comment, block, problems)
            pending_comment = None
            body = []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append((i + 1, lines[i]))
                i += 1
            i += 1
            block.text = "".join(content + "\n" for _, content in body)
            current = None
            j = 0
            while j < len(body):
                number, content = body[j]
                if content.startswith("$ "):
                    command = content[2:]
                    while command.endswith("\\") and j + 1 < len(body):
                        j += 1
                        command = command + "\n" + body[j][1]
                    current = Example(doc, number, command, [])
                    block.examples.append(current)
                elif current is not None:
                    current.expected.append(content)
                j += 1
            for example in block.examples:  # a blank line before the next command is layout
                while example.expected and example.expected[-1].strip() == "":
                    example.expected.pop()
            if block.examples or block.file:
                blocks.append(block)
            continue
        if line.strip():
            pending_comment = None
        i += 1
    return blocks


def line_matches(pattern, actual):
    if "..." not in pattern:
        return pattern.rstrip() == actual.rstrip()
    squeeze = lambda text: re.sub(r"  +", " ", text.rstrip())
    parts = [re.escape(p) for p in squeeze(pattern).split("...")]
    return re.fullmatch(".*".join(parts), squeeze(actual), re.DOTALL) is not None


def output_matches(expected, actual):
    """Whether `actual` lines match `expected`, where a line "..." matches any lines."""
    memo = {}

    def match(e, a):
        key = (e, a)
        if key in memo:
            return memo[key]
        if e == len(expected):
            result = a == len(actual)
        elif expected[e].strip() == "...":
            result = any(match(e + 1, k) for k in range(a, len(actual) + 1))
        else:
            result = a < len(actual) and line_matches(expected[e], actual[a]) and match(e + 1, a + 1)
        memo[key] = result
        return result

    return match(0, 0)


def substitute(text, block, values):
    for old, new in block.replace:
        for name, value in values.items():
            new = new.replace("$" + name, value)
        text = text.replace(old, new)
    return text


def run_block(block, source, build, tmp, report):
    values = {"TMP": tmp, "SRC": source, "BUILD": build}
    env = dict(os.environ)
    env["PATH"] = os.path.join(build, "bin") + os.pathsep + env.get("PATH", "")
    env["TMP"], env["SRC"], env["BUILD"] = tmp, source, build
    env.pop("RAYACCEL_CONFIG_FILE", None)
    # One shell per block: what one command sets up (a background agent), the next uses.
    markers = []
    script = ["set +e"]
    for setup in block.setup:
        script.append(f"( {setup} ) > \"$TMP/.setup.log\" 2>&1 || "
                      f"{{ echo 'setup failed: {setup}'; cat \"$TMP/.setup.log\"; }}")
    for n, example in enumerate(block.examples):
        command = substitute(example.command, block, values)
        marker = f"@@doc-test-{n}@@"
        markers.append(marker)
        script.append(f"echo '{marker}'")
        background = re.search(r"\s&\s*(#[^'\"]*)?$", command)
        if background:
            script.append("{ " + command[:background.start()] + " ; } > /dev/null 2>&1 &")
            script.append(f"echo '{marker}-status 0'")
        elif re.match(r"(\.|source|export|cd|unset)\s", command):
            # What changes the reader's shell changes the block's: the commands after it see it.
            errors = "&1" if block.stderr_shown else f'"$TMP/.stderr-{n}"'
            script.append(f"{command} 2>{errors}")
            script.append(f"echo \"{marker}-status $?\"")
        else:
            errors = "&1" if block.stderr_shown else f'"$TMP/.stderr-{n}"'
            script.append(f"timeout {COMMAND_TIMEOUT_S} bash -c {shlex_quote(command)} 2>{errors}")
            script.append(f"echo \"{marker}-status $?\"")
    script.append("kill $(jobs -p) 2>/dev/null; wait 2>/dev/null")
    proc = subprocess.Popen(["bash", "-c", "\n".join(script)], cwd=source, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    stderr = {}
    try:
        out, _ = proc.communicate(timeout=COMMAND_TIMEOUT_S * (len(block.examples) + 1))
    except subprocess.TimeoutExpired:
        out = ""
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for n in range(len(block.examples)):
            try:
                stderr[n] = open(os.path.join(tmp, f".stderr-{n}")).read().splitlines()
            except OSError:
                stderr[n] = []
    sections = {}
    current = None
    for line in out.splitlines():
        m = re.fullmatch(r"@@doc-test-(\d+)@@(-status (\d+))?", line)
        if m and m.group(2) is None:
            current = int(m.group(1))
            sections[current] = {"lines": [], "status": None}
        elif m:
            sections[int(m.group(1))]["status"] = int(m.group(3))
            current = None
        elif current is not None:
            sections[current]["lines"].append(line)
    failures = 0
    for n, example in enumerate(block.examples):
        where = f"{example.doc}:{example.line}"
        got = sections.get(n)
        if got is None or got["status"] is None:
            report.append(f"{where}: `{example.command}` did not finish")
            failures += 1
            continue
        want_status = block.exit if n == len(block.examples) - 1 else 0
        expected = [substitute(e, block, values) for e in example.expected]
        if got["status"] != want_status:
            report.append(f"{where}: `{example.command}` exited {got['status']}, the doc expects "
                          f"{want_status}; it printed:\n" + indent(got["lines"] + stderr[n]))
            failures += 1
        elif expected and not output_matches(expected, got["lines"]):
            report.append(f"{where}: `{example.command}` printed:\n" + indent(got["lines"]) +
                          "\n  the doc shows:\n" + indent(expected) +
                          ("\n  and on stderr:\n" + indent(stderr[n]) if stderr[n] else ""))
            failures += 1
    return failures


def shlex_quote(text):
    return "'" + text.replace("'", "'\"'\"'") + "'"


def indent(lines):
    return "\n".join("    | " + l for l in lines) if lines else "    | (nothing)"


def check_links(doc, text, source, report):
    failures = 0
    base = os.path.dirname(doc)
    in_fence = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            in_fence = not in_fence
            continue
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = os.path.normpath(os.path.join(base, target.split("#")[0]))
            if not os.path.exists(path):
                report.append(f"{os.path.relpath(doc, source)}:{number}: link to {target}, "
                              "which does not exist")
                failures += 1
        if in_fence:
            continue
        for named in re.findall(r"`([^`\s]+)`", line):
            named = named.rstrip(".,:;)")
            if not named.startswith(PATH_ROOTS) or re.search(r"[<>*{}$]|\.\.\.", named):
                continue
            if not glob.glob(os.path.join(source, named.split("#")[0])):
                report.append(f"{os.path.relpath(doc, source)}:{number}: names `{named}`, "
                              "which does not exist")
                failures += 1
    return failures


def main(argv):
    if len(argv) < 3:
        print(__doc__.split("\n\n")[-2], file=sys.stderr)
        return 2
    source, build = os.path.abspath(argv[1]), os.path.abspath(argv[2])
    # The docs say build/ for the build folder; another one (a sanitizer preset's) is seen there
    # through a folder of links to the source tree, so that commands and their output read as
    # the docs show them.
    farm = None
    if os.path.realpath(build) != os.path.realpath(os.path.join(source, "build")):
        farm = tempfile.mkdtemp(prefix="rayaccel-doc-tree-")
        for entry in os.listdir(source):
            if entry != "build":
                os.symlink(os.path.join(source, entry), os.path.join(farm, entry))
        os.symlink(build, os.path.join(farm, "build"))
    docs = argv[3:] or ([os.path.join(source, "README.md")] +
                        sorted(glob.glob(os.path.join(source, "docs", "**", "*.md"),
                                         recursive=True)))
    report, problems = [], []
    ran = skipped = failed = 0
    for path in docs:
        path = os.path.abspath(path)
        text = open(path, encoding="utf-8").read()
        doc = os.path.relpath(path, source)
        failed += check_links(path, text, source, report)
        tmp = tempfile.mkdtemp(prefix="rayaccel-doc-")
        try:
            for block in parse(doc, text, problems):
                if block.file:
                    with open(os.path.join(tmp, block.file), "w", encoding="utf-8") as f:
                        f.write(block.text)
                    continue
                if block.needs_python and not glob.glob(
                        os.path.join(build, "python", "rayaccel", "_native*.so")):
                    block.skip = "this build has no Python module (a sanitizer build)"
                if block.skip is not None:
                    skipped += len(block.examples)
                    print(f"skip {doc}:{block.line} ({len(block.examples)} commands): "
                          f"{block.skip}")
                    continue
                failed += run_block(block, farm or source, build, tmp, report)
                ran += len(block.examples)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if farm:
        shutil.rmtree(farm, ignore_errors=True)
    report.extend(problems)
    failed += len(problems)
    for entry in report:
        print(entry)
    print(f"doc examples: {ran} run, {skipped} skipped, {failed} problems")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

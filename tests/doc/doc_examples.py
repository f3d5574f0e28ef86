#!/usr/bin/env python3
"""Runs every shell block of README.md and doc/*.md (issue 16: docs that are tested).

A fenced block tagged bash, sh or console (only its "$ " lines) is run unless the line right before its fence
(HTML comments, invisible when rendered, may be stacked) says otherwise:

  <!-- doc-test: skip (REASON) -->       not runnable here; REASON is printed (GPU,
                                         multi-node, Spack, installing, ...)
  <!-- doc-test: fixture NAME -->        run fixture NAME (below) first: a small stand-in
                                         for state the page assumes (e.g. the demo's run)
  <!-- doc-test: expect TEXT -->         the block's output must contain TEXT

Blocks of one page run in order in one scratch directory (a page is read top to bottom),
each with `bash -e -o pipefail`, a time limit, and this environment: `meshtrain` and
`build/cpu/bin/meshtrain` are the built binary; `mpirun` adds the launcher flags of the
test suite (root, oversubscription); `inputs/` is the repository's; one thread per rank;
STEPS=4 (documented variables that shrink a run: `--train.steps=${STEPS:-200}`).
A block without a marker that fails fails the test. The non-runnable blocks and their
reasons are printed at the end.

usage: doc_examples.py SOURCE_DIR MESHTRAIN_BIN SCRATCH_DIR
"""
import os
import re
import shutil
import subprocess
import sys
import time

FENCE = re.compile(r"^```(bash|sh|console)\s*$")
MARKER = re.compile(r"^<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
# Scaled like every limit a test sets itself (tests/support/time_limits.sh).
BLOCK_TIMEOUT_S = 240 * int(os.environ.get("MESHTRAIN_TEST_TIMEOUT_SCALE", "1"))

# Small stand-ins for state a page takes for granted, run in the page's scratch directory.
FIXTURES = {
    # The README demo's run directory (runs/demo with a step-200 checkpoint on the
    # fortunes data), made with the tiny GPT-2 in seconds instead of the demo's minutes.
    "demo-run": "meshtrain prepare --input /usr/share/games/fortunes --output data/fortunes > /dev/null\n"
                "meshtrain train inputs/tiny-gpt2.ini --data.dir=data/fortunes --output.dir=runs/demo "
                "--train.steps=200 --checkpoint.every=200 --train.eval_every=0 --train.log_every=100 > /dev/null\n",
}


def blocks_of(path):
    """(line number of the fence, language, text, [marker strings]) of every shell block."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        markers, j = [], i - 1
        while j >= 0 and MARKER.match(lines[j]):
            markers.insert(0, MARKER.match(lines[j]).group(1))
            j -= 1
        k = i + 1
        while k < len(lines) and not lines[k].startswith("```"):
            k += 1
        out.append((i + 1, m.group(1), "\n".join(lines[i + 1:k]) + "\n", markers))
        i = k + 1
    return out


def parse_markers(where, markers):
    skip, fixtures, expects = None, [], []
    for m in markers:
        if m.startswith("skip"):
            r = re.match(r"skip\s*\((.+)\)$", m)
            if not r:
                raise SystemExit(f"{where}: a skip marker needs a reason: <!-- doc-test: skip (REASON) -->")
            skip = r.group(1)
        elif m.startswith("fixture "):
            name = m.split(None, 1)[1]
            if name not in FIXTURES:
                raise SystemExit(f"{where}: unknown fixture '{name}' (known: {', '.join(FIXTURES)})")
            fixtures.append(name)
        elif m.startswith("expect "):
            expects.append(m.split(None, 1)[1])
        else:
            raise SystemExit(f"{where}: unknown doc-test marker '{m}' (skip (REASON) | fixture NAME | expect TEXT)")
    return skip, fixtures, expects


def scratch_for(page, src, binary, root):
    d = os.path.join(root, os.path.basename(page).replace(".md", ""))
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "build/cpu/bin"))
    os.makedirs(os.path.join(d, ".doc-test-bin"))
    os.symlink(binary, os.path.join(d, "build/cpu/bin/meshtrain"))
    os.symlink(binary, os.path.join(d, ".doc-test-bin/meshtrain"))
    os.symlink(os.path.join(src, "inputs"), os.path.join(d, "inputs"))
    launcher = os.environ.get("MPIEXEC", "mpiexec --oversubscribe --bind-to none --allow-run-as-root")
    with open(os.path.join(d, ".doc-test-bin/mpirun"), "w") as f:
        f.write(f"#!/bin/sh\n# mpirun as the test suite launches it (root, oversubscription)\nexec {launcher} \"$@\"\n")
    os.chmod(os.path.join(d, ".doc-test-bin/mpirun"), 0o755)
    return d


def run(script, cwd, env):
    t0 = time.time()
    try:
        p = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=cwd, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=BLOCK_TIMEOUT_S)
        return p.returncode, p.stdout.decode(errors="replace"), time.time() - t0
    except subprocess.TimeoutExpired as e:
        return 124, (e.stdout or b"").decode(errors="replace") + f"\n(killed after {BLOCK_TIMEOUT_S} s)", time.time() - t0


def main():
    src, binary, root = sys.argv[1], os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
    pages = [os.path.join(src, "README.md")] + sorted(
        os.path.join(src, "doc", f) for f in os.listdir(os.path.join(src, "doc")) if f.endswith(".md"))
    skipped, failed, ran = [], [], 0
    for page in pages:
        rel = os.path.relpath(page, src)
        blocks = blocks_of(page)
        if not blocks:
            continue
        cwd = None
        for line, lang, text, markers in blocks:
            where = f"{rel}:{line}"
            skip, fixtures, expects = parse_markers(where, markers)
            if skip:
                skipped.append((where, skip))
                continue
            if cwd is None:
                cwd = scratch_for(page, src, binary, root)
                env = dict(os.environ, PATH=os.path.join(cwd, ".doc-test-bin") + ":" + os.environ["PATH"],
                           OMP_NUM_THREADS="1", OMP_PROC_BIND="false", OPENBLAS_NUM_THREADS="1", STEPS="4",
                           )
            for name in fixtures:
                rc, out, secs = run(FIXTURES[name], cwd, env)
                print(f"--- {where}: fixture {name} ({secs:.1f} s, exit {rc})")
                if rc != 0:
                    print(out)
                    failed.append(f"{where}: fixture {name} failed")
            if lang == "console":  # "$ command" lines are run; the others are shown output
                text = "".join(l[2:] + "\n" for l in text.split("\n") if l.startswith("$ "))
            print(f"--- {where} ({lang}):\n" + "".join(f"    $ {l}\n" for l in text.rstrip("\n").split("\n")), end="")
            rc, out, secs = run(text, cwd, env)
            ran += 1
            tail = out.rstrip("\n").split("\n")[-15:]
            print("".join(f"    | {l}\n" for l in tail), end="")
            print(f"    exit status {rc} in {secs:.1f} s")
            if rc != 0:
                failed.append(f"{where}: exit status {rc}")
            for e in expects:
                if e not in out:
                    failed.append(f"{where}: the output does not contain '{e}'")
    print(f"\n{ran} shell block(s) run; {len(skipped)} not runnable here:")
    for where, why in skipped:
        print(f"  {where}: {why}")
    if failed:
        print(f"\n{len(failed)} failure(s):")
        for f in failed:
            print(f"  FAIL {f}")
        return 1
    if ran == 0:
        print("no block was run")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

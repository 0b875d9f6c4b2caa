#!/usr/bin/env python3
"""The README and docs/ name only flags that exist (issue: docs that agree).

Every `--flag` written in README.md or docs/*.md must be one that a mimo
tool's --help lists (mimoc and its subcommands, mimo-run, mimo-opt,
tools/mimo-prep, the bench and test scripts' usage lines), or one of the
other programs' flags the docs quote (mpirun, srun, sbatch, ctest, cmake,
nvidia-smi), listed below with the program.

usage: docs_flags.py BUILD_DIR SOURCE_DIR
"""
import glob
import os
import re
import subprocess
import sys

OTHERS = {  # flags of programs that are not mimo's, as the docs quote them
    "ctest": {"--test-dir", "--output-on-failure", "--no-tests"},
    "cmake": {"--build"},
    "mpirun": {"--allow-run-as-root", "--oversubscribe"},
    "srun/sbatch": {"--mpi", "--nodes", "--ntasks", "--ntasks-per-node", "--gpus",
                    "--gpus-per-task", "--kill-on-bad-exit", "--signal"},
    "nvidia-smi": {"--query-gpu"},
    "mpirun --report-bindings": {"--resource-usage"},
    "Megatron-LM": {"--grad-reduce-in-bf16"},
}
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def helps(build, source):
    bin_ = os.path.join(build, "bin")
    texts = []
    cmds = [[os.path.join(bin_, "mimo-run"), "--help"], [os.path.join(bin_, "mimoc"), "--help"]]
    for sub in ("compile", "explain", "simulate", "tune"):
        cmds.append([os.path.join(bin_, "mimoc"), sub, "--help"])
    if os.path.exists(os.path.join(bin_, "mimo-opt")):
        cmds.append([os.path.join(bin_, "mimo-opt"), "--help"])
    cmds.append([sys.executable, os.path.join(source, "tools", "mimo-prep", "mimo-prep"),
                 "--help"])
    for cmd in cmds:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        texts.append(r.stdout + r.stderr)
    # The scripts' own usage lines (their first comment block).
    for path in (glob.glob(os.path.join(source, "scripts", "*.sh")) +
                 glob.glob(os.path.join(source, "bench", "*.py")) +
                 glob.glob(os.path.join(source, "bench", "*.sh")) +
                 glob.glob(os.path.join(source, "tests", "gpu", "*.cpp")) +
                 glob.glob(os.path.join(source, "examples", "*", "*.py"))):
        texts.append(open(path, encoding="utf-8").read()[:6000])
    return texts


def main():
    build, source = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    known = set()
    for text in helps(build, source):
        known |= set(FLAG.findall(text))
    for flags in OTHERS.values():
        known |= flags
    bad = []
    for path in [os.path.join(source, "README.md")] + sorted(
            glob.glob(os.path.join(source, "docs", "*.md"))):
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            for flag in FLAG.findall(line):
                if flag not in known:
                    bad.append(f"{os.path.relpath(path, source)}:{n}: {flag}")
    for b in bad:
        print(f"FAIL {b}: no tool lists this flag (a typo, a removed flag, or "
              "another program's: add it to OTHERS)")
    print(f"docs_flags.py: {len(known)} flags known, {len(bad)} unknown in the docs")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

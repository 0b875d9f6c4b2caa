#!/usr/bin/env python3
"""The layering rule: a folder includes only the folders below it.

The runtime's rooms, lowest first, then the compiler's folders above them
(README.md, "Layout"). A source file in a room may include headers of its
own room and of the rooms before it, never of one after it; a file that
does fails this test, naming the file, the line and the two rooms.

  layering.py ROOT          check the tree at ROOT
  layering.py --self-test   the checker itself fails on an upward include
"""
import os
import re
import sys
import tempfile

ORDER = [
    "runtime/support", "runtime/json", "runtime/schedule", "runtime/family", "runtime/config", "runtime/plan",
    "runtime/cost", "runtime/device", "runtime/comm", "runtime/data",
    "runtime/model", "runtime/checkpoint", "runtime/exec",
    "ir", "passes", "codegen", "tools",
]
SOURCES = (".h", ".cpp", ".cu", ".cuh", ".td")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def room_of(path):
    """The room of a repository-relative path, or None when it is in none."""
    for room in ORDER:
        if path == room or path.startswith(room + "/"):
            return room
    return None


def check(root):
    problems, files = [], 0
    for top in ("runtime", "ir", "passes", "codegen", "tools"):
        for folder, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.relpath(os.path.join(folder, name), root)
                room = room_of(path)
                if room is None:
                    problems.append(f"{path}: in no room of the layering; "
                                    "add its folder to tests/layering.py")
                    continue
                files += 1
                text = open(os.path.join(root, path), encoding="utf-8").read()
                for match in INCLUDE.finditer(text):
                    target = room_of(match.group(1))
                    if target and ORDER.index(target) > ORDER.index(room):
                        line = text.count("\n", 0, match.start()) + 1
                        problems.append(
                            f"{path}:{line}: {room} includes "
                            f"\"{match.group(1)}\" of {target}, a room above "
                            "it; move the code down or the include up")
    return problems, files


def self_test():
    with tempfile.TemporaryDirectory() as root:
        def write(path, text):
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            open(os.path.join(root, path), "w").write(text)
        write("runtime/plan/A.h", '#include "runtime/config/B.h"\n')
        write("runtime/config/B.h", "\n")
        ok, _ = check(root)
        write("runtime/config/B.h", '#include "runtime/exec/C.h"\n')
        bad, _ = check(root)
        assert not ok, ok
        assert len(bad) == 1 and "runtime/config/B.h:1" in bad[0], bad
    print("layering self-test: an upward include is caught")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    problems, files = check(argv[1])
    for problem in problems:
        print(problem)
    if problems:
        return 1
    print(f"layering: {files} files, every include points down")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/env python3
"""Checks the dynamic symbols of libcapsule_c: every function capsule.h declares is exported,
and nothing else is (the C++ runtime inside the library stays local).

usage: check_exports.py LIBRARY capsule.h
"""
import re
import subprocess
import sys


def main():
    library, header = sys.argv[1], sys.argv[2]
    with open(header, encoding="utf-8") as f:
        text = f.read()
    declared = set(re.findall(r"CAPSULE_C_API\s[^;(]*?\b(capsule_\w+)\s*\(", text))
    nm = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True, text=True, check=True)
    exported = set()
    for line in nm.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TtWwDdBbRrVvi" and parts[1] not in "A":
            exported.add(parts[2].split("@")[0])
    problems = []
    if not declared:
        problems.append(f"no CAPSULE_C_API function found in {header}")
    for name in sorted(declared - exported):
        problems.append(f"{name} is declared in capsule.h but not exported")
    for name in sorted(exported - declared):
        problems.append(f"{name} is exported but is not a capsule.h function")
    if problems:
        print("\n".join(problems))
        return 1
    print(f"{len(declared)} functions exported, nothing else")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Fails when a linked program depends on a library it must not: checks the program's link
command (what the build passed to the linker, static archives included) and the NEEDED entries of
its dynamic section (readelf -d).

usage: check_link_deps.py --binary PATH [--link-command-file FILE | --ninja NINJA --build-dir DIR
                          --output OUTPUT] --forbid REGEX [--forbid REGEX ...]

A forbidden REGEX is searched in every word of the link command and in every NEEDED library name,
e.g. 'onnx', 'protobuf', r'^(-lz|.*/libz\\.(so|a).*|libz\\.so.*)$'.
"""
import argparse
import re
import shlex
import subprocess
import sys


def link_words(args):
    if args.link_command_file:
        with open(args.link_command_file, encoding="utf-8") as f:
            text = f.read()
    else:
        text = subprocess.run([args.ninja, "-C", args.build_dir, "-t", "commands", args.output],
                              check=True, capture_output=True, text=True).stdout
        lines = [line for line in text.splitlines() if line.strip()]
        if not lines:
            sys.exit(f"check_link_deps: ninja knows no commands for {args.output}")
        text = lines[-1]  # the link step comes last
    return shlex.split(text)


def needed_libraries(binary):
    out = subprocess.run(["readelf", "-d", binary], check=True, capture_output=True, text=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--link-command-file")
    parser.add_argument("--ninja")
    parser.add_argument("--build-dir")
    parser.add_argument("--output")
    parser.add_argument("--forbid", action="append", required=True)
    args = parser.parse_args()
    if not args.link_command_file and not (args.ninja and args.build_dir and args.output):
        parser.error("give --link-command-file, or --ninja, --build-dir and --output")

    forbidden = [re.compile(r) for r in args.forbid]
    words = link_words(args)
    needed = needed_libraries(args.binary)
    problems = [f"link command: {w} (matches {r.pattern})" for w in words for r in forbidden if r.search(w)]
    problems += [f"NEEDED: {n} (matches {r.pattern})" for n in needed for r in forbidden if r.search(n)]
    print(f"{args.binary}: {len(words)} link command words; NEEDED: {', '.join(needed)}")
    if problems:
        print("forbidden dependencies:\n  " + "\n  ".join(problems))
        return 1
    print("no forbidden dependency")
    return 0


if __name__ == "__main__":
    sys.exit(main())

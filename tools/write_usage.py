#!/usr/bin/env python3
"""Writes the flag reference of docs/usage.md from the program's own --help.

docs/usage.md has a hand-written part (how commands and --config files
work) above the marker line; below it, this script writes each
subcommand's `--help`, so the reference is the parser's own word.

  tools/write_usage.py --binary build/bin/hybrid3d           # rewrite docs/usage.md
  tools/write_usage.py --binary build/bin/hybrid3d --check   # exit 1 if it is stale (test usage_doc)
"""
import argparse
import difflib
import os
import subprocess
import sys

MARKER = "<!-- Everything below is written by tools/write_usage.py from `hybrid3d COMMAND --help`. -->"
COMMANDS = ["train", "predict", "generate", "preprocess"]
DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "usage.md")


def helptext(binary, command):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    r = subprocess.run([binary, command, "--help"], capture_output=True, text=True, env=env, timeout=60)
    if r.returncode != 0 or "Options:" not in r.stdout:
        sys.exit(f"{binary} {command} --help failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout.rstrip() + "\n"


def generated(binary):
    parts = [MARKER, ""]
    for c in COMMANDS:
        parts += [f"## hybrid3d {c}", "", "```", helptext(binary, c).rstrip(), "```", ""]
    return "\n".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--doc", default=DOC)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    with open(a.doc) as f:
        text = f.read()
    if MARKER not in text:
        sys.exit(f"{a.doc} has no marker line; the hand-written part must end with:\n{MARKER}")
    new = text[:text.index(MARKER)] + generated(a.binary)
    if a.check:
        if new != text:
            sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True), a.doc, "--help"))
            sys.exit(f"{a.doc} is not what --help says: run tools/write_usage.py --binary {a.binary}")
        print(f"{a.doc}: the flag reference matches --help of {len(COMMANDS)} commands")
        return
    with open(a.doc, "w") as f:
        f.write(new)
    print(f"wrote {a.doc}")


if __name__ == "__main__":
    main()

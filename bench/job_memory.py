#!/usr/bin/python3
"""Runs a command (an mpirun job) and reports the peak of the summed resident
memory of the command and all its descendants, sampled every 0.1 s from
/proc: the job's total peak memory on this machine (each rank's own peak RSS,
as --profile reports it, can fall at different times).

usage: bench/job_memory.py [--json OUT] -- COMMAND ...
Prints the command's output, then 'job peak memory: X MiB'. Exits with the
command's status.
"""
import json
import os
import subprocess
import sys
import time


def descendants(pid):
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            kids.setdefault(ppid, []).append(int(d))
        except (OSError, ValueError, IndexError):
            pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def main():
    args = sys.argv[1:]
    out_json = None
    if args[:1] == ["--json"]:
        out_json, args = args[1], args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        sys.exit(__doc__)
    t0 = time.time()
    proc = subprocess.Popen(args)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, sum(rss_kib(p) for p in descendants(proc.pid)))
        time.sleep(0.1)
    wall = time.time() - t0
    print(f"job peak memory: {peak / 1024:.0f} MiB ({peak / 1024 / 1024:.2f} GiB), wall {wall:.1f} s, exit {proc.returncode}")
    if out_json:
        with open(out_json, "w") as f:
            json.dump({"peak_mib": peak / 1024, "wall_s": wall, "exit": proc.returncode, "command": args}, f)
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()

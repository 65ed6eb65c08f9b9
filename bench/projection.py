#!/usr/bin/env python3
"""The planner's projection of cosmoflow-lbann 512^3 to the paper's scale
(docs/scaling.md, "Projection").

For each machine file and each device count from 8 to 2048, asks
`hybrid3d plan --json` for every layout of the job and keeps the one the
planner picks (the fastest that fits the device's memory):

- strong scaling: a fixed global batch, more devices. hybrid3d splits a
  sample at most 8 ways at 512^3 (every layer on one grid) and has no
  gradient accumulation, so no single batch spans 8 to 2048 devices: each
  batch in --strong-batches is a line over the devices where a layout of it
  exists (at most 8 per sample) and fits;
- weak scaling: a fixed share, one sample per 8 devices (batch = devices/8).

Prints a markdown table per machine (layout, step time, time per sample,
parallel efficiency against the line's first point, the step's parts and
what limits it) and draws the two plots as PNG files.

    python3 bench/projection.py [--binary build/bin/hybrid3d] [--out docs/img]
"""
import argparse
import json
import os
import subprocess
import sys

# (label, machine file, memory per device, devices per node)
MACHINES = [
    ("V100 cluster (4 GPUs of 16 GiB per node)", "docs/machines/v100_cluster.json", "16GiB", 4),
    ("CPU cluster (2 cores of 12 GiB per node)", "docs/machines/cpu_cluster.json", "12GiB", 2),
]
DEVICES = [8, 16, 32, 64, 128, 256, 512, 1024, 2048]


def plan(binary, machine, memory, per_node, devices, batch):
    cmd = [binary, "plan", "--model", "cosmoflow-lbann", "--input-size", "512", "--batch-size", str(batch),
           "--ranks", str(devices), "--ranks-per-node", str(per_node), "--memory-per-rank", memory,
           "--machine", machine, "--optimizer", "adam", "--data-store-mib", "0", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
    layouts = json.loads(r.stdout)
    chosen = [p for p in layouts if p["chosen"]]
    if not chosen:
        return None, f"none of {len(layouts)} layouts fits {memory}"
    return chosen[0], ""


def series(binary, machine, memory, per_node, batch_of, devices):
    rows = []
    for n in devices:
        batch = batch_of(n)
        p, why = plan(binary, machine, memory, per_node, n, batch)
        rows.append(dict(devices=n, batch=batch, plan=p, why=why))
        said = (f"{p['data_groups']} x {p['spatial']}, step {p['step_seconds']:.3f} s ({p['limited_by']})" if p
                else why)
        print(f"  {n:5d} devices, batch {batch:4d}: {said}", file=sys.stderr, flush=True)
    return rows


def table(rows, strong):
    base = next((r for r in rows if r["plan"]), None)
    out = ["| devices | batch | layout (groups x spatial) | step s | ms per sample | efficiency | compute s | "
           "halo s | allreduce s | peak GiB/device | limited by |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p = r["plan"]
        if not p:
            out.append(f"| {r['devices']} | {r['batch']} | {r['why']} | | | | | | | | |")
            continue
        per_sample = p["step_seconds"] / r["batch"]
        if strong:  # time per sample x devices, against the line's first point
            eff = (base["plan"]["step_seconds"] / base["batch"] * base["devices"]) / (per_sample * r["devices"])
        else:  # the same work per device: the step should not grow
            eff = base["plan"]["step_seconds"] / p["step_seconds"]
        s = p["seconds"]
        out.append(f"| {r['devices']} | {r['batch']} | {p['data_groups']} x {p['spatial']} | {p['step_seconds']:.3f} | "
                   f"{1e3 * per_sample:.1f} | {100 * eff:.0f}% | {s['compute']:.3f} | {s['halo']:.4f} | "
                   f"{s['allreduce']:.4f} | {p['peak_rss_bytes'] / 2**30:.2f} | {p['limited_by']} |")
        r["efficiency"] = eff
        r["per_sample_ms"] = 1e3 * per_sample
    return "\n".join(out)


def plot(lines, path, strong):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is missing: {path} not drawn (apt-get install python3-matplotlib)", file=sys.stderr)
        return
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.4))
    for label, rows in lines:
        ok = [r for r in rows if r["plan"]]
        if not ok:
            continue
        xs = [r["devices"] for r in ok]
        if strong:
            a.loglog(xs, [r["per_sample_ms"] for r in ok], "o-", label=label)
            ideal = [ok[0]["per_sample_ms"] * ok[0]["devices"] / x for x in xs]
            a.loglog(xs, ideal, ":", color=a.lines[-1].get_color(), alpha=0.6)
        else:
            a.semilogx(xs, [r["plan"]["step_seconds"] for r in ok], "o-", label=label)
        b.semilogx(xs, [100 * r["efficiency"] for r in ok], "o-", label=label)
    a.set_ylabel("ms per sample (dotted: ideal)" if strong else "step time, s")
    b.set_ylabel("parallel efficiency, %" + (" of the line's first point" if strong else " of 8 devices"))
    b.set_ylim(0, 110)
    for ax in (a, b):
        ax.set_xlabel("devices")
        ax.grid(True, which="both", alpha=0.3)
        ax.set_xticks(DEVICES)
        ax.set_xticklabels([str(d) for d in DEVICES])
    a.legend(fontsize=7)
    what = "strong scaling (each line one global batch)" if strong else "weak scaling, one sample per 8 devices"
    fig.suptitle(f"cosmoflow-lbann 512^3 projected by hybrid3d plan: {what}")
    fig.tight_layout()
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)
    print(f"wrote {path}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="build/bin/hybrid3d")
    ap.add_argument("--strong-batches", default="8,64,256")
    ap.add_argument("--out", default="docs/img", help="folder for the PNG plots")
    ap.add_argument("--table", default="bench/out/projection.md")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(os.path.dirname(a.table), exist_ok=True)
    text, strong_lines, weak_lines = [], [], []
    for label, machine, memory, per_node in MACHINES:
        short = label.split(" (")[0]
        for batch in [int(b) for b in a.strong_batches.split(",")]:
            print(f"{label}: strong scaling, batch {batch}", file=sys.stderr)
            devices = [n for n in DEVICES if n <= 8 * batch]  # beyond, no layout: at most 8 ranks per sample
            rows = series(a.binary, machine, memory, per_node, lambda n, b=batch: b, devices)
            text += [f"### {label}: strong scaling, global batch {batch}", "", table(rows, True), ""]
            strong_lines.append((f"{short}, batch {batch}", rows))
        print(f"{label}: weak scaling", file=sys.stderr)
        weak = series(a.binary, machine, memory, per_node, lambda n: max(1, n // 8), DEVICES)
        text += [f"### {label}: weak scaling (one sample per 8 devices)", "", table(weak, False), ""]
        weak_lines.append((short, weak))
    plot(strong_lines, os.path.join(a.out, "projection_strong.png"), True)
    plot(weak_lines, os.path.join(a.out, "projection_weak.png"), False)
    out = "\n".join(text)
    print(out)
    with open(a.table, "w") as f:
        f.write(out)


if __name__ == "__main__":
    main()

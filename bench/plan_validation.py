#!/usr/bin/env python3
"""The planner against measured runs (docs/scaling.md, "Validation").

For each case: `hybrid3d plan --json` predicts the layout's peak resident
memory per rank and its step time (with a machine file that
`hybrid3d plan --calibrate` wrote for the model and thread count), then the
same job trains for a few steps from HDF5 files through mpirun as the README
writes it, with --profile (peak RSS per rank) and --metrics (step times).
Prints a markdown table of predicted against measured, with the errors, and
writes it to bench/out/plan_validation.{md,json}.

    python3 bench/plan_validation.py [--binary build/bin/hybrid3d] [--quick]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
CORES = os.cpu_count() or 2

# (model, input size, extra model flags, batch, ranks, spatial)
CASES = [
    ("cosmoflow", 128, [], 1, 1, "1x1x1"),
    ("cosmoflow", 128, [], 2, 2, "2x1x1"),
    ("cosmoflow", 128, [], 2, 2, "1x1x1"),
    ("cosmoflow", 128, [], 1, 4, "2x2x1"),
    ("cosmoflow", 128, [], 1, 8, "2x2x2"),
    ("cosmoflow-lbann", 128, [], 1, 1, "1x1x1"),
    ("cosmoflow-lbann", 128, [], 1, 2, "1x2x1"),
    ("cosmoflow-lbann", 128, [], 1, 4, "2x2x1"),
    ("cosmoflow-lbann", 128, [], 1, 8, "2x2x2"),
    ("unet3d", 64, ["--base-channels", "16"], 1, 1, "1x1x1"),
    ("unet3d", 64, ["--base-channels", "16"], 1, 2, "2x1x1"),
    ("unet3d", 64, ["--base-channels", "16"], 1, 4, "1x2x2"),
    ("cosmoflow-lbann", 512, [], 1, 8, "2x2x2"),
]


def run(cmd, **kw):
    r = subprocess.run(cmd, env=kw.pop("env", ENV), capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r.stdout


def data_for(binary, work, model, size):
    kind = "segmentation" if model == "unet3d" else "cosmoflow"
    out = os.path.join(work, f"{kind}{size}")
    if not os.path.isdir(out):
        run(["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", "-x", "OMP_NUM_THREADS=1", binary,
             "generate", "--kind", kind, "--out", out, "--count", "2", "--size", str(size), "--quiet"])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="build/bin/hybrid3d")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--quick", action="store_true", help="leave out the 512^3 case")
    ap.add_argument("--out", default="bench/out/plan_validation")
    ap.add_argument("--only", default="", help="run only the cases whose 'model size ranks' contains this text")
    a = ap.parse_args()
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    work = tempfile.mkdtemp(prefix="plan_validation_")
    machines = {}
    rows = []
    for model, size, flags, batch, ranks, spatial in CASES:
        if a.quick and size >= 512:
            continue
        if a.only and a.only not in f"{model} {size} {ranks}":
            continue
        threads = max(1, CORES // ranks)
        # Calibrated with as many ranks measuring at once as share a core set
        # in the run (at most the cores: beyond them the model divides).
        together = min(ranks, CORES)
        key = (model, tuple(flags), threads, together)
        if key not in machines:
            path = os.path.join(work, f"machine_{model}_{threads}_{together}.json")
            run(["mpirun", "-np", str(together), "--oversubscribe", "--bind-to", "none", "-x",
                 f"OMP_NUM_THREADS={threads}", a.binary, "plan", "--model", model, "--input-size", str(size), *flags,
                 "--optimizer", "adam", "--calibrate", path])
            machines[key] = path
        data = data_for(a.binary, work, model, size)
        common = ["--model", model, "--input-size", str(size), *flags, "--batch-size", str(batch),
                  "--optimizer", "adam", "--data-store-mib", "0"]
        plan = json.loads(run([a.binary, "plan", *common, "--ranks", str(ranks), "--data", "files",
                               "--machine", machines[key], "--json"]))
        mine = [p for p in plan if p["spatial"] == spatial]
        if not mine:
            sys.exit(f"plan has no {spatial} for {model} {size} on {ranks} ranks")
        p = mine[0]
        prof, metrics = os.path.join(work, "profile.json"), os.path.join(work, "metrics.jsonl")
        if os.path.exists(metrics):
            os.remove(metrics)
        run(["mpirun", "-np", str(ranks), "--oversubscribe", "--bind-to", "none", "-x", f"OMP_NUM_THREADS={threads}",
             a.binary, "train", *common, "--data", data, "--spatial", spatial, "--steps", str(a.steps),
             "--val-fraction", "0", "--threads", str(threads), "--profile", prof, "--metrics", metrics, "--quiet",
             "--memory-per-rank", "100GiB"])
        rss = json.load(open(prof))["memory"]["peak_rss_per_rank"]["max"] * 2**20
        steps = [json.loads(l) for l in open(metrics) if '"train"' in l]
        times = [s["step_time_s"] for s in steps][1:]  # the first step builds the kernels
        t = statistics.median(times)
        row = dict(model=model, size=size, ranks=ranks, spatial=spatial, threads=threads, batch=batch,
                   predicted_rss=p["peak_rss_bytes"], measured_rss=rss, predicted_s=p["step_seconds"], measured_s=t,
                   rss_error=p["peak_rss_bytes"] / rss - 1, time_error=p["step_seconds"] / t - 1)
        rows.append(row)
        print(f"{model} {size}^3 {ranks} ranks {spatial}: RSS {rss / 2**20:.0f} MiB predicted "
              f"{p['peak_rss_bytes'] / 2**20:.0f} ({100 * row['rss_error']:+.1f}%); step {t:.3f} s predicted "
              f"{p['step_seconds']:.3f} ({100 * row['time_error']:+.1f}%)", flush=True)
    lines = ["| model | ranks | spatial | threads/rank | peak RSS/rank measured | predicted | error | "
             "step s measured (median) | predicted | error |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} {r['size']}^3 | {r['ranks']} | {r['spatial']} | {r['threads']} | "
                     f"{r['measured_rss'] / 2**20:.0f} MiB | {r['predicted_rss'] / 2**20:.0f} MiB | "
                     f"{100 * r['rss_error']:+.1f}% | {r['measured_s']:.3f} | {r['predicted_s']:.3f} | "
                     f"{100 * r['time_error']:+.1f}% |")
    worst_mem = max(abs(r["rss_error"]) for r in rows)
    small = [r for r in rows if r["ranks"] <= 2]
    worst_time = max(abs(r["time_error"]) for r in small) if small else float("nan")
    lines.append("")
    lines.append(f"Worst memory error {100 * worst_mem:.1f}% over {len(rows)} runs; worst step-time error on 1 "
                 f"and 2 ranks {100 * worst_time:.1f}%.")
    text = "\n".join(lines) + "\n"
    print(text)
    open(a.out + ".md", "w").write(text)
    json.dump(rows, open(a.out + ".json", "w"), indent=1)


if __name__ == "__main__":
    main()

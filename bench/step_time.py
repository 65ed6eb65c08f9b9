#!/usr/bin/python3
"""One training step (forward, backward, SGD update) of hybrid3d against
PyTorch (Debian's python3-torch) on the same machine in the same run.

Each side runs in its own process with the same thread count for a few
steps; the best step after the first is reported, with each process's own
peak RSS (hybrid3d's from --profile, PyTorch's from getrusage). hybrid3d's
step includes turning its cached int16 input block into float (log1p);
PyTorch's input is a ready float tensor. Never a test: prints only.

usage: bench/step_time.py HYBRID3D_BINARY [--model cosmoflow] [--size 128] [--batch 1] [--threads 2] [--steps 4]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REF_DIR = os.path.join(HERE, "..", "tests", "reference")

PEER = r"""
import sys, time, torch, torch.nn as nn, resource
sys.path.insert(0, sys.argv[1])
from test_against_pytorch import CosmoFlow, CosmoFlowLbann
side, steps, model, batch = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[6])
torch.set_num_threads(int(sys.argv[5]))
net = CosmoFlow(side) if model == "cosmoflow" else CosmoFlowLbann(side)
opt = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)
x, y = torch.rand(batch, 4, side, side, side), torch.rand(batch, 4)
best = 1e30
for i in range(steps):
    t = time.perf_counter()
    opt.zero_grad(); nn.functional.mse_loss(net(x), y).backward(); opt.step()
    if i > 0: best = min(best, time.perf_counter() - t)
print(best, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def hybrid3d_step(binary, model, size, batch, threads, steps, mpi=None, spatial="1x1x1", extra=()):
    """Best step time (s) and the profile JSON of a hybrid3d run; mpi: number of ranks; extra: more flags."""
    with tempfile.TemporaryDirectory() as work:
        metrics, profile = os.path.join(work, "m.jsonl"), os.path.join(work, "p.json")
        cmd = [binary, "train", "--model", model, "--input-size", str(size), "--batch-size", str(batch),
               "--train-samples", str(batch), "--val-samples", "0", "--steps", str(steps), "--lr", "1e-3",
               "--optimizer", "sgd", "--momentum", "0.9", "--threads", str(threads), "--spatial", spatial,
               "--metrics", metrics, "--profile", profile, "--quiet", *extra]
        if mpi:
            cmd = ["mpirun", "-np", str(mpi), "--oversubscribe", "--bind-to", "none", "-x",
                   f"OMP_NUM_THREADS={threads}"] + cmd
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMPI_ALLOW_RUN_AS_ROOT="1",
                   OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
        times = [json.loads(l)["step_time_s"] for l in open(metrics)][1:]
        return min(times), json.load(open(profile)), " ".join(cmd)


def pytorch_step(model, size, batch, threads, steps):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", PEER, REF_DIR, str(size), str(steps), model, str(threads), str(batch)],
                         env=env, check=True, capture_output=True, text=True).stdout
    t, rss = out.split()
    return float(t), int(rss) / 1024.0  # s, MiB


def measure(binary, model, size, batch, threads, steps, rounds=2):
    """Alternates hybrid3d and PyTorch `rounds` times (this machine's speed
    drifts by tens of percent over minutes) and keeps the best of each."""
    h_t = t_t = float("inf")
    for _ in range(rounds):
        t, p, c = hybrid3d_step(binary, model, size, batch, threads, steps)
        if t < h_t:
            h_t, prof, cmd = t, p, c
        t, rss = pytorch_step(model, size, batch, threads, steps)
        if t < t_t:
            t_t, t_rss = t, rss
    return {"model": model, "size": size, "batch": batch, "threads": threads, "hybrid3d_s": h_t,
            "pytorch_s": t_t, "speedup": t_t / h_t, "hybrid3d_rss_mib": prof["memory"]["peak_rss_per_rank"]["max"],
            "pytorch_rss_mib": t_rss, "command": cmd, "profile": prof}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--model", default="cosmoflow")
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    a = ap.parse_args()
    r = measure(a.binary, a.model, a.size, a.batch, a.threads, a.steps)
    print(f"{a.model} {a.size}^3 x 4, batch {a.batch}, {a.threads} threads, best of {a.steps - 1} steps after the first")
    print(f"  hybrid3d: {r['hybrid3d_s']:8.3f} s/step   peak RSS {r['hybrid3d_rss_mib']:7.0f} MiB")
    print(f"  PyTorch : {r['pytorch_s']:8.3f} s/step   peak RSS {r['pytorch_rss_mib']:7.0f} MiB")
    print(f"  speed-up hybrid3d vs PyTorch: {r['speedup']:.2f}x; memory ratio "
          f"{r['hybrid3d_rss_mib'] / r['pytorch_rss_mib']:.2f}")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""One cosmoflow training step at 128^3 x 4, batch 1: hybrid3d against
PyTorch (Debian's python3-torch) on the same machine in the same run.

Each side runs in its own process (so its peak RSS is its own), with the same
thread count, for a few steps; the best step after the first is reported.
hybrid3d's step includes converting its cached int16 input block to float
(log1p); PyTorch's input is a ready float tensor. Never a test: prints only.

usage: bench/step_time.py HYBRID3D_BINARY [--size 128] [--threads 2] [--steps 4] [--model cosmoflow]
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

PEER = r"""
import sys, time, torch, torch.nn as nn, numpy as np, resource
sys.path.insert(0, sys.argv[1])
from test_against_pytorch import CosmoFlow, CosmoFlowLbann
side, steps, model = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(int(sys.argv[5]))
net = CosmoFlow(side) if model == "cosmoflow" else CosmoFlowLbann(side)
opt = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)
x, y = torch.rand(1, 4, side, side, side), torch.rand(1, 4)
best = 1e30
for i in range(steps):
    t = time.perf_counter()
    opt.zero_grad(); nn.functional.mse_loss(net(x), y).backward(); opt.step()
    if i > 0: best = min(best, time.perf_counter() - t)
print(best, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def run_child(cmd, env):
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return out, max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--model", default="cosmoflow")
    a = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    with tempfile.TemporaryDirectory() as work:
        metrics = os.path.join(work, "m.jsonl")
        _, h_rss = run_child([a.binary, "train", "--model", a.model, "--input-size", str(a.size), "--batch-size", "1",
                              "--train-samples", "1", "--val-samples", "0", "--steps", str(a.steps), "--lr", "1e-3",
                              "--threads", str(a.threads), "--metrics", metrics, "--quiet"], env)
        times = [json.loads(l)["step_time_s"] for l in open(metrics)][1:]
        h_best = min(times)
    ref_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference")
    out, _ = run_child([sys.executable, "-c", PEER, ref_dir, str(a.size), str(a.steps), a.model, str(a.threads)], env)
    t_best, t_rss = out.split()
    t_best, t_rss = float(t_best), int(t_rss)
    print(f"{a.model} {a.size}^3 x 4, batch 1, {a.threads} threads, best of {a.steps - 1} steps after the first")
    print(f"  hybrid3d: {h_best:8.3f} s/step   peak RSS {h_rss / 1024:7.0f} MiB")
    print(f"  PyTorch : {t_best:8.3f} s/step   peak RSS {t_rss / 1024:7.0f} MiB")
    print(f"  speed-up hybrid3d vs PyTorch: {t_best / h_best:.2f}x; memory ratio {h_rss / t_rss:.2f}")


if __name__ == "__main__":
    main()

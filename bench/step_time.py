#!/usr/bin/python3
"""Training steps of hybrid3d against PyTorch (Debian's python3-torch) on the
same machine in the same run, the way users run them.

Each side runs in its own process with the same thread count. Both report
every step after the first; the typical (median) step is the figure that
counts, the best is shown beside it. The data comes either from memory
(synthetic: hybrid3d generates it, PyTorch uses a random tensor) or from HDF5
files written beforehand by this script with h5py (another program than
hybrid3d): CosmoFlow's layout (`full` int16 (D, H, W, 4) counts, `unitPar`)
or LiTS's (`volume` float32, `segmentation` uint8). From files, hybrid3d
reads through its prefetcher (its default) and PyTorch through a DataLoader
with one worker process (its usual way to read ahead); both pay log1p on the
counts. Each step reads samples no step read before. Peak RSS: hybrid3d's
from --profile, PyTorch's from getrusage. Never a test: prints only.

Networks: cosmoflow and cosmoflow-lbann (SGD with momentum, MSE), unet3d
(base 32, 3 levels, Adam, cross-entropy; the 3D U-Net of
tests/reference/test_against_pytorch.py).

usage: bench/step_time.py HYBRID3D_BINARY [--model cosmoflow] [--size 128] [--batch 1] [--threads 2]
                          [--steps 6] [--files]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REF_DIR = os.path.join(HERE, "..", "tests", "reference")

PEER = r"""
import glob, json, resource, sys, time
import h5py, numpy as np, torch, torch.nn as nn
a = json.loads(sys.argv[1])
sys.path.insert(0, a["ref_dir"])
from test_against_pytorch import CosmoFlow, CosmoFlowLbann, UNet3D
torch.set_num_threads(a["threads"])
model, side, batch, steps = a["model"], a["size"], a["batch"], a["steps"]
seg = model == "unet3d"
if seg:
    net = UNet3D(cin=1, classes=3, b=a["base"], levels=a["levels"])
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    loss_of = lambda z, y: nn.functional.cross_entropy(z, y)
else:
    net = CosmoFlow(side) if model == "cosmoflow" else CosmoFlowLbann(side)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)
    loss_of = lambda z, y: nn.functional.mse_loss(z, y)

class Files(torch.utils.data.Dataset):
    def __init__(self, paths):
        self.paths = paths
    def __len__(self):
        return len(self.paths)
    def __getitem__(self, i):
        with h5py.File(self.paths[i], "r") as f:
            if seg:
                return torch.from_numpy(f["volume"][...][None]), torch.from_numpy(f["segmentation"][...].astype(np.int64))
            x = np.log1p(f["full"][...].astype(np.float32)).transpose(3, 0, 1, 2)
            return torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(f["unitPar"][...].astype(np.float32))

if a["data"]:
    loader = iter(torch.utils.data.DataLoader(Files(sorted(glob.glob(a["data"] + "/*.h5"))), batch_size=batch,
                                              num_workers=1, prefetch_factor=2))
    next_batch = lambda: next(loader)
else:
    x = torch.rand(batch, 1 if seg else 4, side, side, side)
    y = torch.randint(0, 3, (batch, side, side, side)) if seg else torch.rand(batch, 4)
    next_batch = lambda: (x, y)
times = []
for i in range(steps):
    t = time.perf_counter()
    xb, yb = next_batch()
    opt.zero_grad(); loss_of(net(xb), yb).backward(); opt.step()
    times.append(time.perf_counter() - t)
print(json.dumps({"times": times[1:], "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}))
"""

UNET_BASE, UNET_LEVELS = 32, 3


def write_files(model, size, count, out):
    """`count` samples as HDF5 files in `out`, written with h5py (not by hybrid3d)."""
    import h5py
    rng = np.random.default_rng(0)
    for i in range(count):
        with h5py.File(os.path.join(out, f"sample_{i:04d}.h5"), "w") as f:
            if model == "unet3d":
                v = rng.random((size,) * 3, dtype=np.float32)
                f["volume"] = v
                f["segmentation"] = (v * 3).astype(np.uint8)
            else:
                f["full"] = rng.poisson(2.0, (size, size, size, 4)).astype(np.int16)
                f["unitPar"] = rng.uniform(-1, 1, 4).astype(np.float32)


def model_flags(model):
    if model == "unet3d":
        return ["--base-channels", str(UNET_BASE), "--levels", str(UNET_LEVELS), "--optimizer", "adam", "--loss", "ce"]
    return ["--optimizer", "sgd", "--momentum", "0.9"]


def hybrid3d_step(binary, model, size, batch, threads, steps, mpi=None, spatial="1x1x1", extra=(), data=None):
    """Step times after the first (s), the profile JSON and the command of a hybrid3d run.
    mpi: number of ranks; extra: more flags; data: a directory of files (else synthetic)."""
    with tempfile.TemporaryDirectory() as work:
        metrics, profile = os.path.join(work, "m.jsonl"), os.path.join(work, "p.json")
        source = ["--data", data] if data else ["--train-samples", str(batch)]
        cmd = [binary, "train", "--model", model, "--input-size", str(size), "--batch-size", str(batch), *source,
               "--val-samples", "0", "--steps", str(steps), "--lr", "1e-3", *model_flags(model),
               "--threads", str(threads), "--spatial", spatial, "--metrics", metrics, "--profile", profile,
               "--quiet", *extra]
        if mpi:
            cmd = ["mpirun", "-np", str(mpi), "--oversubscribe", "--bind-to", "none", "-x",
                   f"OMP_NUM_THREADS={threads}"] + cmd
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMPI_ALLOW_RUN_AS_ROOT="1",
                   OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
        times = [json.loads(l)["step_time_s"] for l in open(metrics)][1:]
        return times, json.load(open(profile)), " ".join(cmd)


def pytorch_step(model, size, batch, threads, steps, data=None):
    """Step times after the first (s) and the peak RSS (MiB) of the PyTorch peer."""
    args = {"ref_dir": REF_DIR, "model": model, "size": size, "batch": batch, "threads": threads, "steps": steps,
            "data": data, "base": UNET_BASE, "levels": UNET_LEVELS}
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", PEER, json.dumps(args)], env=env, check=True, capture_output=True,
                         text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return r["times"], r["rss_mib"]


def measure(binary, model, size, batch, threads, steps, rounds=2, files=False):
    """Alternates hybrid3d and PyTorch `rounds` times (this machine's speed
    drifts by tens of percent over minutes); the median is over the steps of
    all rounds, the best the best of them."""
    h, t, prof, cmd, t_rss = [], [], None, "", 0.0
    with tempfile.TemporaryDirectory() as work:
        data = None
        if files:
            data = os.path.join(work, "data")
            os.makedirs(data)
            write_files(model, size, batch * steps, data)
        for _ in range(rounds):
            times, p, c = hybrid3d_step(binary, model, size, batch, threads, steps, data=data)
            h += times
            prof, cmd = prof or p, cmd or c
            times, rss = pytorch_step(model, size, batch, threads, steps, data=data)
            t += times
            t_rss = max(t_rss, rss)
    hm, tm = statistics.median(h), statistics.median(t)
    return {"model": model, "size": size, "batch": batch, "threads": threads, "files": files,
            "hybrid3d_s": hm, "hybrid3d_best_s": min(h), "pytorch_s": tm, "pytorch_best_s": min(t),
            "speedup": tm / hm, "speedup_best": min(t) / min(h),
            "hybrid3d_rss_mib": prof["memory"]["peak_rss_per_rank"]["max"], "pytorch_rss_mib": t_rss,
            "command": cmd, "profile": prof}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--model", default="cosmoflow")
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--files", action="store_true", help="read HDF5 files written beforehand (else synthetic)")
    a = ap.parse_args()
    r = measure(a.binary, a.model, a.size, a.batch, a.threads, a.steps, files=a.files)
    print(f"{a.model} {a.size}^3, batch {a.batch}, {a.threads} threads, {'files' if a.files else 'synthetic'}, "
          f"steps after the first of {a.steps}, 2 rounds")
    print(f"  hybrid3d: median {r['hybrid3d_s']:7.3f} s/step, best {r['hybrid3d_best_s']:7.3f}   "
          f"peak RSS {r['hybrid3d_rss_mib']:7.0f} MiB")
    print(f"  PyTorch : median {r['pytorch_s']:7.3f} s/step, best {r['pytorch_best_s']:7.3f}   "
          f"peak RSS {r['pytorch_rss_mib']:7.0f} MiB")
    print(f"  speed-up hybrid3d vs PyTorch: {r['speedup']:.2f}x typical, {r['speedup_best']:.2f}x best")


if __name__ == "__main__":
    main()

"""hybrid3d against PyTorch on the same data from the same initial weights.

PyTorch builds the CosmoFlow network for the arm's side (the class the
reference tests check layer by layer, tests/reference) with its own default
initialisation; those weights are written as safetensors and both frameworks
start from them (--init). Both then train `steps` steps of Adam with the same
learning rate, warm-up and poly decay, batch, MSE loss and input transform
(log1p), no dropout, over the training pieces in a shuffled order of their
own: `runs` orders (seeds) each. The run-to-run spread is the standard
deviation over those orders of each `window`-step mean of the training loss;
the frameworks agree where their mean curves differ by less than that spread.
"""
import glob
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "reference"))


def schedule(step, lr, warmup, total):
    """hybrid3d's poly schedule (train/lr_schedule.cpp), power 1, end 0."""
    if warmup > 0 and step < warmup:
        return lr * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return lr * (1.0 - t)


class Pieces:
    """Every piece of a preprocess output directory, read on demand (channels first, log1p)."""

    def __init__(self, directory):
        import h5py
        self.files = [h5py.File(f, "r") for f in sorted(glob.glob(os.path.join(directory, "*.h5")))]
        self.index = [(i, j) for i, f in enumerate(self.files) for j in range(f["full"].shape[0])]

    def __len__(self):
        return len(self.index)

    def get(self, k):
        i, j = self.index[k]
        f = self.files[i]
        x = np.moveaxis(np.asarray(f["full"][j], dtype=np.float32), -1, 0)
        return np.log1p(x), np.asarray(f["unitPar"][j], dtype=np.float32)


def torch_run(init, data, side, p, tcfg, seed):
    import torch
    from test_against_pytorch import CosmoFlow, load_safetensors
    torch.set_num_threads(p["threads"])
    net = CosmoFlow(side)
    net.load_state_dict(load_safetensors(init))
    opt = torch.optim.Adam(net.parameters(), lr=p["lr"], betas=(0.9, 0.999), eps=1e-8)
    g = torch.Generator().manual_seed(seed)
    n, b = len(data), p["batch"]
    per_epoch = n // b
    losses, order = [], None
    t0 = time.time()
    for step in range(p["steps"]):
        if step % per_epoch == 0:
            order = torch.randperm(n, generator=g).tolist()
        ids = order[(step % per_epoch) * b:(step % per_epoch + 1) * b]
        xs, ys = zip(*(data.get(k) for k in ids))
        x, y = torch.from_numpy(np.stack(xs)), torch.from_numpy(np.stack(ys))
        for group in opt.param_groups:
            group["lr"] = schedule(step, p["lr"], tcfg["warmup_steps"], p["steps"])
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses, time.time() - t0


def hybrid3d_run(binary, init, data_dir, side, p, tcfg, seed, work, logfile):
    metrics = os.path.join(work, f"hybrid3d_seed{seed}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [binary, "train", "--model", "cosmoflow", "--input-size", str(side), "--data", data_dir, "--init", init,
           "--batch-size", str(p["batch"]), "--steps", str(p["steps"]), "--optimizer", "adam", "--lr", str(p["lr"]),
           "--lr-schedule", "poly", "--warmup-steps", str(tcfg["warmup_steps"]), "--seed", str(seed),
           "--threads", str(p["threads"]), "--metrics", metrics, "--quiet"]
    t0 = time.time()
    with open(logfile, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        subprocess.run(cmd, check=True, stdout=f, stderr=subprocess.STDOUT)
    wall = time.time() - t0
    rows = [json.loads(line) for line in open(metrics)]
    return [r["loss"] for r in rows if r.get("type") == "train"], wall


def run(binary, data_dir, side, p, tcfg, work, logfile):
    import torch
    from test_against_pytorch import CosmoFlow, save_safetensors
    os.makedirs(work, exist_ok=True)
    torch.manual_seed(1234)
    init = os.path.join(work, "init.safetensors")
    save_safetensors(init, CosmoFlow(side).state_dict())
    data = Pieces(data_dir)
    curves = {"hybrid3d": [], "pytorch": []}
    walls = {"hybrid3d": [], "pytorch": []}
    for seed in range(1, p["runs"] + 1):
        l, w = hybrid3d_run(binary, init, data_dir, side, p, tcfg, seed, work, logfile)
        curves["hybrid3d"].append(l), walls["hybrid3d"].append(w)
        l, w = torch_run(init, data, side, p, tcfg, seed)
        curves["pytorch"].append(l), walls["pytorch"].append(w)
    return summarise(curves, walls, p)


def summarise(curves, walls, p, window=None):
    window = window or max(1, min(25, p["steps"] // 4))
    res = {"arm": p["arm"], "steps": p["steps"], "runs": p["runs"], "batch": p["batch"], "lr": p["lr"],
           "window": window, "curves": curves, "walls": walls}
    nw = p["steps"] // window
    res["window_step"] = [(w + 0.5) * window for w in range(nw)]
    for fw, cs in curves.items():
        a = np.asarray(cs)[:, :nw * window].reshape(len(cs), nw, window).mean(2)  # runs x windows
        res[fw] = {"window_mean": a.mean(0).tolist(), "window_std": a.std(0, ddof=1).tolist() if len(cs) > 1
                   else [0.0] * nw, "final_mean": float(a[:, -1].mean())}
    mh, mt = np.asarray(res["hybrid3d"]["window_mean"]), np.asarray(res["pytorch"]["window_mean"])
    sh, st = np.asarray(res["hybrid3d"]["window_std"]), np.asarray(res["pytorch"]["window_std"])
    diff, spread = np.abs(mh - mt), np.sqrt(sh ** 2 + st ** 2)
    res.update({"max_mean_diff": float(diff.max()), "max_spread": float(max(sh.max(), st.max())),
                "windows": int(nw), "windows_outside": int((diff > spread).sum())})
    return res

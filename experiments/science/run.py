#!/usr/bin/env python3
"""Whole volumes against sub-volumes, end to end (docs/science.md).

    experiments/science/run.py --config experiments/science/local.toml \
        --work build/science --out build/science/report

Generates the universes (train, validation and test splits by universe),
cuts them into the sub-volume datasets, fits the power-spectrum baseline,
trains every arm at every learning rate and seed through the hybrid3d
command line (under mpirun, as a user would), predicts the validation and
test universes (`hybrid3d predict`, the mean over each universe's pieces),
chooses each arm's learning rate on validation, runs the PyTorch parity
check, and writes results.json, table.md and the figures to --out.

Every step leaves its outputs under --work and is skipped when a rerun finds
them complete, so an interrupted experiment continues where it stopped.
"""
import argparse
import glob
import json
import os
import shlex
import subprocess
import sys
import time
import tomllib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import baseline  # noqa: E402
import report  # noqa: E402

SPLITS = ("train", "val", "test")


def log(msg):
    print(time.strftime("%H:%M:%S"), msg, flush=True)


def run_cmd(cmd, logfile):
    """Runs `cmd` (a list), its output appended to `logfile`; raises with the log's tail on failure."""
    with open(logfile, "a") as f:
        f.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
        f.flush()
        t0 = time.time()
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT)
    if rc != 0:
        with open(logfile) as f:
            tail = f.read()[-3000:]
        raise SystemExit(f"failed ({rc}): {' '.join(cmd)}\n--- {logfile} ---\n{tail}")
    return time.time() - t0


class Experiment:
    def __init__(self, cfg, work, binary):
        self.cfg, self.work, self.bin = cfg, work, binary
        self.size = cfg["data"]["size"]
        self.launch = cfg["launch"]
        os.makedirs(work, exist_ok=True)
        self.logfile = os.path.join(work, "commands.log")

    def mpirun(self, ranks=None, threads=None):
        ranks = ranks or self.launch["ranks"]
        threads = threads or self.launch["threads"]
        return shlex.split(self.launch["mpirun"].format(ranks=ranks, threads=threads)) + [self.bin]

    def universes(self, split):
        return os.path.join(self.work, "universes", split)

    def dataset(self, side, split):
        return self.universes(split) if side == self.size else os.path.join(self.work, f"sub{side}", split)

    # 1. Universes, split by universe: disjoint ranges of the generator's stream.
    def generate(self):
        d = self.cfg["data"]
        first = 0
        for split in SPLITS:
            n, out = d[split], self.universes(split)
            if len(glob.glob(os.path.join(out, "*.h5"))) != n:
                log(f"generate {n} {split} universes of {self.size}^3")
                run_cmd(self.mpirun() + ["generate", "--out", out, "--count", str(n), "--size", str(self.size),
                                         "--seed", str(d["seed"]), "--first-index", str(first), "--quiet"],
                        self.logfile)
            first += n

    # 2. Sub-volume datasets, one file per universe (its pieces as a leading dimension).
    def preprocess(self):
        for arm in self.cfg["arm"]:
            s = arm["side"]
            if s == self.size:
                continue
            assert self.size % s == 0, f"arm {arm['name']}: side {s} does not divide {self.size}"
            for split in SPLITS:
                out = self.dataset(s, split)
                if not os.path.exists(os.path.join(out, "manifest.json")):
                    log(f"preprocess {split} into {s}^3 pieces")
                    run_cmd(self.mpirun() + ["preprocess", "--in", self.universes(split), "--out", out,
                                             "--sample-size", str(s), "--samples-per-file",
                                             str((self.size // s) ** 3), "--quiet"], self.logfile)

    # 3. The power-spectrum baseline at every arm's side.
    def baseline(self):
        path = os.path.join(self.work, "baseline.json")
        if os.path.exists(path):
            return json.load(open(path))
        log("baseline: power spectra and ridge regression")
        files = {s: sorted(glob.glob(os.path.join(self.universes(s), "*.h5"))) for s in SPLITS}
        t0 = time.time()
        res = baseline.run(files["train"], files["val"], files["test"], [a["side"] for a in self.cfg["arm"]],
                           self.cfg["baseline"]["alphas"])
        res = {str(k): v for k, v in res.items()}
        res["wall_s"] = time.time() - t0
        json.dump(res, open(path + ".tmp", "w"))
        os.replace(path + ".tmp", path)
        return res

    def batch(self, arm):
        return max(1, self.cfg["train"]["voxels_per_step"] // arm["side"] ** 3)

    def steps_per_pass(self, arm):
        pieces = self.cfg["data"]["train"] * (self.size // arm["side"]) ** 3
        return pieces // self.batch(arm)

    # 4. One training run and its predictions.
    def train_run(self, arm, lr, seed):
        t = self.cfg["train"]
        name = f"{arm['name']}_lr{lr:g}_seed{seed}"
        d = os.path.join(self.work, "runs", name)
        done = os.path.join(d, "run.json")
        if os.path.exists(done):
            return dict(json.load(open(done)), dir=d)
        os.makedirs(d, exist_ok=True)
        s = arm["side"]
        log(f"train arm {arm['name']} ({s}^3, batch {self.batch(arm)}, {arm['spatial']}) lr {lr:g} seed {seed}")
        for f in ("metrics.jsonl", "train.log"):
            if os.path.exists(os.path.join(d, f)):
                os.remove(os.path.join(d, f))
        every = max(1, self.steps_per_pass(arm) // t["evals_per_pass"])
        model = ["--model", "cosmoflow", "--input-size", str(s)]
        wall = run_cmd(self.mpirun() + ["train"] + model + [
            "--spatial", arm["spatial"], "--data", self.dataset(s, "train"), "--val-data", self.dataset(s, "val"),
            "--batch-size", str(self.batch(arm)), "--epochs", str(t["passes"]), "--optimizer", t["optimizer"],
            "--lr", str(lr), "--lr-schedule", t["lr_schedule"], "--warmup-steps", str(t["warmup_steps"]),
            "--dropout", str(t["dropout"]), "--seed", str(seed), "--val-every", str(every), "--log-every", "16",
            "--threads", str(self.launch["threads"]), "--metrics", os.path.join(d, "metrics.jsonl"),
            "--save", os.path.join(d, "weights.safetensors")], os.path.join(d, "train.log"))
        out = {"arm": arm["name"], "side": s, "lr": lr, "seed": seed, "train_wall_s": wall,
               "batch": self.batch(arm), "steps": self.steps_per_pass(arm) * t["passes"]}
        for split in ("val", "test"):
            csv = os.path.join(d, f"{split}.csv")
            out[f"{split}_predict_wall_s"] = run_cmd(self.mpirun() + ["predict"] + model + [
                "--spatial", arm["spatial"], "--init", os.path.join(d, "weights.safetensors"),
                "--data", self.dataset(s, split), "--batch-size", str(max(2, min(64, self.batch(arm)))),
                "--threads", str(self.launch["threads"]), "--out", csv], os.path.join(d, "predict.log"))
            out[split] = report.read_predictions(csv, s != self.size)
        json.dump(out, open(done + ".tmp", "w"))
        os.replace(done + ".tmp", done)
        return dict(out, dir=d)

    def train_all(self):
        runs = []
        for arm in self.cfg["arm"]:
            for lr in arm.get("lrs", self.cfg["train"]["lrs"]):
                for seed in self.cfg["train"]["seeds"]:
                    runs.append(self.train_run(arm, lr, seed))
        return runs

    # 5. PyTorch parity on one arm's data.
    def parity(self):
        p = self.cfg.get("parity")
        if not p or p.get("runs", 0) == 0:
            return None
        path = os.path.join(self.work, "parity.json")
        if os.path.exists(path):
            return json.load(open(path))
        arm = next(a for a in self.cfg["arm"] if a["name"] == p["arm"])
        log(f"parity with PyTorch: arm {arm['name']}, {p['steps']} steps x {p['runs']} runs each")
        import parity
        res = parity.run(self.bin, self.dataset(arm["side"], "train"), arm["side"], p, self.cfg["train"],
                         os.path.join(self.work, "parity"), self.logfile)
        json.dump(res, open(path + ".tmp", "w"))
        os.replace(path + ".tmp", path)
        return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=os.path.join(HERE, "local.toml"))
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "science"), help="data, runs and logs")
    ap.add_argument("--out", help="report directory (default: WORK/report)")
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "bin", "hybrid3d"))
    a = ap.parse_args()
    with open(a.config, "rb") as f:
        cfg = tomllib.load(f)
    out = a.out or os.path.join(a.work, "report")
    if not os.access(a.binary, os.X_OK):
        raise SystemExit(f"{a.binary} is not an executable: build first (make build) or give --binary")
    t0 = time.time()
    e = Experiment(cfg, a.work, a.binary)
    walls = {}
    for step in ("generate", "preprocess"):
        s = time.time()
        getattr(e, step)()
        walls[step] = time.time() - s
    base = e.baseline()
    runs = e.train_all()
    par = e.parity()
    walls["total_s"] = time.time() - t0
    res = report.write(cfg, a.config, base, runs, par, walls, out)
    log(f"wrote {out}/table.md, results.json and the figures")
    print(open(os.path.join(out, "table.md")).read())
    return 0 if res else 1


if __name__ == "__main__":
    sys.exit(main())

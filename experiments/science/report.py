"""Results of the science experiment: choice of learning rate, test errors
with bootstrap intervals, the table (Markdown), results.json and figures."""
import csv
import json
import os

import numpy as np

PARAMS = ["Omega_m", "sigma_8", "n_s", "H_0"]


def read_predictions(path, per_universe):
    """{names, true, pred} per universe from `hybrid3d predict`'s CSV (the
    .universes.csv beside it for sub-volume datasets), sorted by universe."""
    if per_universe:
        path = path[:-4] + ".universes.csv"
    rows = list(csv.DictReader(open(path)))
    key = "source" if per_universe else "file"
    rows.sort(key=lambda r: os.path.basename(r[key]))
    return {"names": [os.path.basename(r[key]) for r in rows],
            "true": [[float(r["true_" + p]) for p in PARAMS] for r in rows],
            "pred": [[float(r["pred_" + p]) for p in PARAMS] for r in rows]}


def errors(true, pred):
    d = np.asarray(pred) - np.asarray(true)
    return (d ** 2).mean(0), np.abs(d).mean(0)


def bootstrap(sq, resamples, seed=0):
    """2.5 and 97.5 percentiles of the mean of per-universe squared errors
    `sq` (universes x params) over resamples of the universes; the same
    resamples for every caller (paired)."""
    rng = np.random.default_rng(seed)
    n = len(sq)
    idx = rng.integers(0, n, size=(resamples, n))
    per = sq[idx].mean(1)  # resamples x params
    mean = per.mean(1)
    return np.percentile(mean, [2.5, 97.5]), np.percentile(per, [2.5, 97.5], axis=0)


def choose(runs, arm):
    """The arm's learning rate with the lowest validation MSE (mean over its seeds)."""
    by_lr = {}
    for r in runs:
        if r["arm"] == arm:
            mse, _ = errors(r["val"]["true"], r["val"]["pred"])
            by_lr.setdefault(r["lr"], []).append(float(mse.mean()))
    return min(by_lr, key=lambda lr: np.mean(by_lr[lr])), {str(k): float(np.mean(v)) for k, v in by_lr.items()}


def curves(run_dir):
    tr, va = [], []
    for line in open(os.path.join(run_dir, "metrics.jsonl")):
        m = json.loads(line)
        if m.get("type") == "train":
            tr.append((m["step"], m["loss"]))
        elif m.get("type") in ("val", "validation"):
            va.append((m["step"], m["mse"]))
    return tr, va


def write(cfg, config_path, base, runs, parity, walls, out):
    os.makedirs(out, exist_ok=True)
    nb = cfg["report"]["bootstrap"]
    res = {"config": os.path.basename(config_path), "data": cfg["data"], "train": cfg["train"],
           "launch": cfg["launch"], "walls": walls, "arms": [], "baseline": {}, "parity": parity}
    names = None
    for arm in cfg["arm"]:
        lr, val_by_lr = choose(runs, arm["name"])
        chosen = [r for r in runs if r["arm"] == arm["name"] and r["lr"] == lr]
        names = names or chosen[0]["test"]["names"]
        assert all(r["test"]["names"] == names for r in chosen), "arms predicted different test universes"
        true = np.asarray(chosen[0]["test"]["true"])
        pred = np.mean([r["test"]["pred"] for r in chosen], 0)  # the seeds' mean prediction
        seed_mse = [errors(r["test"]["true"], r["test"]["pred"])[0].tolist() for r in chosen]
        mse, mae = errors(true, pred)
        ci, ci_param = bootstrap((pred - true) ** 2, nb)
        arm_runs = [r for r in runs if r["arm"] == arm["name"]]
        res["arms"].append({
            "name": arm["name"], "side": arm["side"], "spatial": arm["spatial"], "batch": chosen[0]["batch"],
            "steps": chosen[0]["steps"], "lr": lr, "val_mse_by_lr": val_by_lr,
            "test_mse": float(mse.mean()), "test_mse_ci": ci.tolist(), "test_mse_param": mse.tolist(),
            "test_mse_param_ci": ci_param.tolist(), "test_mae_param": mae.tolist(), "seed_test_mse_param": seed_mse,
            "train_wall_s": float(np.mean([r["train_wall_s"] for r in chosen])),
            "arm_wall_s": float(sum(r["train_wall_s"] + r["val_predict_wall_s"] + r["test_predict_wall_s"]
                                    for r in arm_runs)),
            "true": true.tolist(), "pred": pred.tolist(), "run": f"{arm['name']}_lr{lr:g}_seed{chosen[0]['seed']}"})
    for arm in cfg["arm"]:
        b = base[str(arm["side"])]
        assert b["names"] == names, "the baseline predicted different test universes"
        t, p = np.asarray(b["true"]), np.asarray(b["pred"])
        mse, mae = errors(t, p)
        ci, ci_param = bootstrap((p - t) ** 2, nb)
        res["baseline"][str(arm["side"])] = {"alpha": b["alpha"], "test_mse": float(mse.mean()),
                                             "test_mse_ci": ci.tolist(), "test_mse_param": mse.tolist(),
                                             "test_mse_param_ci": ci_param.tolist(), "test_mae_param": mae.tolist(),
                                             "true": t.tolist(), "pred": p.tolist()}
    # Paired ratios of the arms' test MSE (same bootstrap resamples of the universes).
    rng = np.random.default_rng(1)
    idx = rng.integers(0, len(names), size=(nb, len(names)))
    sq = {a["name"]: ((np.asarray(a["pred"]) - np.asarray(a["true"])) ** 2).mean(1) for a in res["arms"]}
    first = res["arms"][0]["name"]
    res["ratios"] = {}
    for a in res["arms"][1:]:
        r = sq[a["name"]][idx].mean(1) / sq[first][idx].mean(1)
        res["ratios"][f"{a['name']}/{first}"] = {"value": float(sq[a["name"]].mean() / sq[first].mean()),
                                                 "ci": np.percentile(r, [2.5, 97.5]).tolist()}
    res["test_universes"] = len(names)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(table(res))
    try:
        figures(res, runs, cfg, out)
    except ImportError as e:  # matplotlib is optional for the numbers
        print(f"figures skipped: {e}")
    return res


def fmt_ci(v, ci):
    return f"{v:.4f} [{ci[0]:.4f}, {ci[1]:.4f}]"


def table(res):
    lines = [f"Test MSE on {res['test_universes']} test universes (unitPar scale, mean of the four parameters), "
             "95% bootstrap interval over the test universes.", "",
             "| arm | input | batch | steps | lr | CNN test MSE | baseline test MSE | train wall (s) |",
             "|---|---|---|---|---|---|---|---|"]
    for a in res["arms"]:
        b = res["baseline"][str(a["side"])]
        lines.append(f"| {a['name']} | {a['side']}^3 ({a['spatial']}) | {a['batch']} | {a['steps']} | {a['lr']:g} | "
                     f"{fmt_ci(a['test_mse'], a['test_mse_ci'])} | {fmt_ci(b['test_mse'], b['test_mse_ci'])} | "
                     f"{a['train_wall_s']:.0f} |")
    lines += ["", "Per parameter, test MSE (MAE):", "",
              "| arm | " + " | ".join(PARAMS) + " |", "|---|" + "---|" * len(PARAMS)]
    for a in res["arms"]:
        b = res["baseline"][str(a["side"])]
        lines.append(f"| {a['name']} CNN | " + " | ".join(
            f"{m:.4f} ({e:.3f})" for m, e in zip(a["test_mse_param"], a["test_mae_param"])) + " |")
        lines.append(f"| {a['name']} baseline | " + " | ".join(
            f"{m:.4f} ({e:.3f})" for m, e in zip(b["test_mse_param"], b["test_mae_param"])) + " |")
    lines += ["", "Paired ratios of the CNN's test MSE (95% bootstrap interval):", ""]
    for k, v in res["ratios"].items():
        lines.append(f"- {k}: {v['value']:.2f} [{v['ci'][0]:.2f}, {v['ci'][1]:.2f}]")
    lines += ["", "Validation MSE by learning rate:", ""]
    for a in res["arms"]:
        lines.append(f"- {a['name']}: " + ", ".join(f"lr {k}: {v:.4f}" for k, v in a["val_mse_by_lr"].items()))
    p = res.get("parity")
    if p:
        lines += ["", f"PyTorch parity (arm {p['arm']}, {p['steps']} steps, {p['runs']} data orders each): "
                  f"largest |mean difference| of the {p['window']}-step window means {p['max_mean_diff']:.4f}, "
                  f"largest run-to-run spread (std) {p['max_spread']:.4f}; windows where the difference exceeds "
                  f"the spread: {p['windows_outside']} of {p['windows']}."]
    return "\n".join(lines) + "\n"


def figures(res, runs, cfg, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    arms = res["arms"]
    sides = [a["side"] for a in arms]
    # 1. Test MSE per parameter against input size.
    fig, axs = plt.subplots(1, 5, figsize=(17, 3.4))
    for j, ax in enumerate(axs):
        for label, src, mk in (("CNN", arms, "o-"), ("baseline", [res["baseline"][str(s)] for s in sides], "s--")):
            if j < 4:
                v = [a["test_mse_param"][j] for a in src]
                lo = [a["test_mse_param"][j] - a["test_mse_param_ci"][0][j] for a in src]
                hi = [a["test_mse_param_ci"][1][j] - a["test_mse_param"][j] for a in src]
            else:
                v = [a["test_mse"] for a in src]
                lo = [a["test_mse"] - a["test_mse_ci"][0] for a in src]
                hi = [a["test_mse_ci"][1] - a["test_mse"] for a in src]
            ax.errorbar(sides, v, yerr=[lo, hi], fmt=mk, capsize=3, label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sides, [str(s) for s in sides])
        ax.set_title(PARAMS[j] if j < 4 else "mean of the four")
        ax.set_xlabel("input side")
    axs[0].set_ylabel("test MSE (unitPar)")
    axs[0].legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "mse_vs_size.png"), dpi=90)
    plt.close(fig)
    # 2. Predicted against true.
    fig, axs = plt.subplots(len(arms), 4, figsize=(13, 3.2 * len(arms)), squeeze=False)
    for i, a in enumerate(arms):
        t, p = np.asarray(a["true"]), np.asarray(a["pred"])
        b = res["baseline"][str(a["side"])]
        for j in range(4):
            ax = axs[i][j]
            ax.plot([-1, 1], [-1, 1], "k:", lw=1)
            ax.scatter(np.asarray(b["true"])[:, j], np.asarray(b["pred"])[:, j], s=9, c="tab:orange", alpha=0.6,
                       label="baseline")
            ax.scatter(t[:, j], p[:, j], s=9, c="tab:blue", label="CNN")
            ax.set_title(f"arm {a['name']} ({a['side']}^3): {PARAMS[j]}", fontsize=9)
            ax.set_xlim(-1.1, 1.1)
            ax.set_ylim(-1.3, 1.3)
    axs[0][0].legend(fontsize=7)
    for ax in axs[-1]:
        ax.set_xlabel("true")
    for row in axs:
        row[0].set_ylabel("predicted")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "pred_vs_true.png"), dpi=80)
    plt.close(fig)
    # 3. Training and validation curves of every run (the chosen one bold).
    fig, axs = plt.subplots(1, len(arms), figsize=(5 * len(arms), 3.4), squeeze=False)
    for ax, a in zip(axs[0], arms):
        for r in runs:
            if r["arm"] != a["name"]:
                continue
            name = f"{r['arm']}_lr{r['lr']:g}_seed{r['seed']}"
            d = r["dir"]
            if not os.path.exists(os.path.join(d, "metrics.jsonl")):
                continue
            tr, va = curves(d)
            bold = name == a["run"]
            s, l = np.asarray(tr).T
            k = max(1, len(l) // 40)
            sm = np.convolve(l, np.ones(k) / k, mode="valid")
            line, = ax.plot(s[k - 1:], sm, lw=1.8 if bold else 0.7, label=f"lr {r['lr']:g} train")
            if va:
                vs, vl = np.asarray(va).T
                ax.plot(vs, vl, "o--", color=line.get_color(), lw=1.8 if bold else 0.7, ms=3,
                        label=f"lr {r['lr']:g} val (per piece)")
        ax.set_yscale("log")
        ax.set_title(f"arm {a['name']} ({a['side']}^3, batch {a['batch']})")
        ax.set_xlabel("step")
        ax.legend(fontsize=6)
    axs[0][0].set_ylabel("MSE")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "curves.png"), dpi=80)
    plt.close(fig)
    # 4. Parity.
    p = res.get("parity")
    if p:
        fig, ax = plt.subplots(figsize=(7, 3.6))
        for fw, c in (("hybrid3d", "tab:blue"), ("pytorch", "tab:red")):
            m, s = np.asarray(p[fw]["window_mean"]), np.asarray(p[fw]["window_std"])
            x = np.asarray(p["window_step"])
            ax.plot(x, m, color=c, label=f"{fw} (mean of {p['runs']} runs)")
            ax.fill_between(x, m - s, m + s, color=c, alpha=0.2)
        ax.set_xlabel("step")
        ax.set_ylabel(f"training loss ({p['window']}-step window mean)")
        ax.set_title(f"arm {p['arm']} data, same --init: hybrid3d vs PyTorch (band: run-to-run std)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out, "parity.png"), dpi=90)
        plt.close(fig)

"""The non-CNN baseline: ridge regression on binned power spectra.

Each (sub-)volume of side s gives, per redshift channel, the power spectrum
of its overdensity delta = n / mean(n) - 1, binned in half-octave shells of
|k| from the box's fundamental (1/s cycles per voxel) to Nyquist (1/2), as
log P per bin, plus the channel's log mean count. A ridge regression from
these features (standardised on the training set) to the four unitPar is
fitted on the training universes' pieces; its strength is chosen on the
validation universes. The prediction for a universe is the mean over its
pieces, as for the CNN arms.

For a Gaussian field the power spectrum is a sufficient statistic, so this
is a strong baseline: a CNN has to find what the log-normal and Poisson
transforms put beyond it, or use it better than a linear map.
"""
import argparse
import glob
import json
import os
import sys

import numpy as np

PARAMS = ["Omega_m", "sigma_8", "n_s", "H_0"]


def read_universe(path):
    """(C, D, H, W) float64 counts and the unitPar of a generated universe."""
    import h5py
    with h5py.File(path, "r") as f:
        full = np.asarray(f["full"][()], dtype=np.float64)
        par = np.asarray(f["unitPar"][()], dtype=np.float64).reshape(-1)[:4]
    if full.ndim == 4 and full.shape[-1] == 4:  # original layout (D, H, W, C)
        full = np.moveaxis(full, -1, 0)
    return full, par


def pieces(vol, s):
    """The s^3 sub-volumes of a (C, S, S, S) volume, in D, H, W order (as preprocess)."""
    S = vol.shape[1]
    out = []
    for a in range(0, S, s):
        for b in range(0, S, s):
            for c in range(0, S, s):
                out.append(vol[:, a:a + s, b:b + s, c:c + s])
    return out


def shell_edges(s):
    """Half-octave |k| shells (cycles per voxel) from the fundamental to Nyquist."""
    n = int(round(2 * np.log2(s / 2.0)))
    return (1.0 / s) * 2.0 ** (np.arange(n + 1) / 2.0)


def features(piece):
    """log P(k) per shell and log mean count, for each channel of a (C, s, s, s) piece."""
    s = piece.shape[1]
    f = np.fft.fftfreq(s)
    fz = np.fft.rfftfreq(s)
    k = np.sqrt(f[:, None, None] ** 2 + f[None, :, None] ** 2 + fz[None, None, :] ** 2)
    edges = shell_edges(s)
    idx = np.digitize(k.ravel(), edges) - 1  # shell of each mode; -1 and len(edges)-1 fall outside
    nshell = len(edges) - 1
    ok = (idx >= 0) & (idx < nshell)
    counts = np.bincount(idx[ok], minlength=nshell)
    out = []
    for ch in piece:
        mean = ch.mean()
        delta = ch / max(mean, 1e-12) - 1.0
        p = np.abs(np.fft.rfftn(delta)) ** 2 / delta.size
        ps = np.bincount(idx[ok], weights=p.ravel()[ok], minlength=nshell) / np.maximum(counts, 1)
        out.extend(np.log(np.maximum(ps, 1e-12)))
        out.append(np.log(max(mean, 1e-12)))
    return np.array(out)


def universe_features(path, s):
    vol, par = read_universe(path)
    return np.stack([features(p) for p in pieces(vol, s)]), par


class Ridge:
    def fit(self, x, y, alpha):
        self.mu, self.sd = x.mean(0), x.std(0) + 1e-12
        z = (x - self.mu) / self.sd
        self.ym = y.mean(0)
        a = z.T @ z + alpha * len(z) * np.eye(z.shape[1])
        self.w = np.linalg.solve(a, z.T @ (y - self.ym))
        return self

    def predict(self, x):
        return ((x - self.mu) / self.sd) @ self.w + self.ym


def per_universe(model, feats):
    """Mean over each universe's pieces."""
    return np.stack([model.predict(f).mean(0) for f in feats])


def run(train, val, test, sizes, alphas=(1e-4, 1e-3, 1e-2, 1e-1, 1.0)):
    """Fits and scores the baseline at each size; returns {size: result}."""
    results = {}
    for s in sizes:
        tr = [universe_features(p, s) for p in train]
        va = [universe_features(p, s) for p in val]
        te = [universe_features(p, s) for p in test]
        x = np.concatenate([f for f, _ in tr])
        y = np.concatenate([np.repeat(par[None], len(f), 0) for f, par in tr])
        yv = np.stack([par for _, par in va])
        best = None
        for a in alphas:
            m = Ridge().fit(x, y, a)
            mse = float(((per_universe(m, [f for f, _ in va]) - yv) ** 2).mean())
            if best is None or mse < best[0]:
                best = (mse, a, m)
        _, alpha, m = best
        yt = np.stack([par for _, par in te])
        pred = per_universe(m, [f for f, _ in te])
        results[s] = {"alpha": alpha, "names": [os.path.basename(p) for p in test], "val_mse": best[0], "true": yt.tolist(), "pred": pred.tolist(),
                      "features": int(x.shape[1]), "train_pieces": int(len(x))}
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="directory of generated universes (univ_*.h5)")
    ap.add_argument("--sizes", default="32,64,128")
    ap.add_argument("--split", default="0.6,0.2", help="train and validation shares; the rest is test")
    ap.add_argument("--out", help="write the results as JSON here")
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.data, "*.h5")))
    ftr, fva = (float(v) for v in a.split.split(","))
    ntr, nva = int(len(files) * ftr), int(len(files) * fva)
    res = run(files[:ntr], files[ntr:ntr + nva], files[ntr + nva:], [int(v) for v in a.sizes.split(",")])
    for s, r in res.items():
        t, p = np.array(r["true"]), np.array(r["pred"])
        mse = ((p - t) ** 2).mean(0)
        print(f"size {s:4d}: test MSE {mse.mean():.4f}  per param " + " ".join(
            f"{n}={v:.4f}" for n, v in zip(PARAMS, mse)) + f"  (alpha {r['alpha']:g}, {r['features']} features)")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({str(k): v for k, v in res.items()}, f)


if __name__ == "__main__":
    sys.exit(main())

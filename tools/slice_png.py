#!/usr/bin/python3
"""One slice of a segmentation case as a PNG: image, truth, prediction.

usage: tools/slice_png.py --input CASE.h5 --pred PRED.h5 --out slice.png [--axis 0] [--index N]

CASE.h5 is a LiTS-layout case ('volume', and 'segmentation' if it has
labels), PRED.h5 the output of `hybrid3d predict`. By default the slice is
the one with the most tumour (class 2) voxels in the truth, or else in the
prediction. Classes are drawn as background (none), organ (green), tumour
(red) over the image.
"""
import argparse
import sys

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

COLOURS = np.array([[0, 0, 0, 0], [0.1, 0.8, 0.2, 0.45], [0.95, 0.1, 0.1, 0.7]])


def overlay(ax, image, labels, title):
    ax.imshow(image, cmap="gray")
    if labels is not None:
        ax.imshow(COLOURS[np.clip(labels, 0, len(COLOURS) - 1)])
    ax.set_title(title)
    ax.axis("off")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", required=True)
    ap.add_argument("--pred", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--axis", type=int, default=0, choices=(0, 1, 2))
    ap.add_argument("--index", type=int)
    a = ap.parse_args()
    try:
        with h5py.File(a.input, "r") as f:
            volume = f["volume"][:]
            truth = f["segmentation"][:] if "segmentation" in f else None
        with h5py.File(a.pred, "r") as f:
            pred = f["segmentation"][:]
    except (OSError, KeyError) as e:
        sys.exit(f"slice_png: cannot read the inputs: {e}")
    if volume.ndim == 4:
        volume = volume[0]
    if pred.shape != volume.shape[-3:]:
        sys.exit(f"slice_png: the prediction is {pred.shape}, the volume {volume.shape}; give the matching files")
    ref = truth if truth is not None and (truth == 2).any() else pred
    other = tuple(d for d in range(3) if d != a.axis)
    index = a.index if a.index is not None else int((ref == 2).sum(axis=other).argmax())
    take = lambda v: np.take(v, index, axis=a.axis) if v is not None else None  # noqa: E731
    panels = [("image", None), ("truth", take(truth)), ("prediction", take(pred))]
    if truth is None:
        panels.pop(1)
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 4.3))
    for ax, (title, labels) in zip(axes, panels):
        overlay(ax, take(volume), labels, f"{title} (axis {a.axis}, slice {index})")
    fig.tight_layout()
    fig.savefig(a.out, dpi=90)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()

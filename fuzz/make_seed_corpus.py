#!/usr/bin/env python3
"""Writes the seed corpus in fuzz/corpus/ (committed; rerun only to change it).

Small valid inputs of each kind, so the fuzzer starts from files that pass
the first checks and mutates its way into the deeper ones."""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def put(kind, name, data):
    d = os.path.join(HERE, "corpus", kind)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(entries, metadata=None):
    header, blobs, off = {}, b"", 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, fmt, values in entries:
        raw = struct.pack("<" + fmt * len(values), *values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs += raw
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-(len(h) + 8) % 8)
    return struct.pack("<Q", len(h)) + h + blobs


put("safetensors", "weights_f32", safetensors([("conv1.weight", "F32", [2, 1, 1, 1, 3], "f", [0.5 * i for i in range(6)]),
                                               ("bn1.num_batches_tracked", "I64", [], "q", [7])], {"format": "pt"}))
put("safetensors", "mixed_types", safetensors([("a", "F64", [2], "d", [1.0, -2.0]), ("b", "I32", [1, 2], "i", [3, 4]),
                                               ("c", "F32", [0], "f", [])]))
put("safetensors", "empty_header", safetensors([]))


def nifti1(dims, code, bits, fmt, values, slope=0.0, inter=0.0, order="<"):
    h = bytearray(348)
    struct.pack_into(order + "i", h, 0, 348)
    struct.pack_into(order + "8h", h, 40, len(dims), *dims, *([1] * (7 - len(dims))))
    struct.pack_into(order + "hh", h, 70, code, bits)
    struct.pack_into(order + "8f", h, 76, 1.0, 1.5, 1.5, 2.0, 1, 1, 1, 1)
    struct.pack_into(order + "fff", h, 108, 352.0, slope, inter)
    struct.pack_into(order + "hh", h, 252, 0, 1)
    struct.pack_into(order + "4f", h, 280, 1.5, 0, 0, -10)
    struct.pack_into(order + "4f", h, 296, 0, 1.5, 0, -10)
    struct.pack_into(order + "4f", h, 312, 0, 0, 2.0, 5)
    h[344:348] = b"n+1\0"
    return bytes(h) + b"\0\0\0\0" + struct.pack(order + fmt * len(values), *values)


def nifti2(dims, code, bits, fmt, values):
    h = bytearray(540)
    struct.pack_into("<i", h, 0, 540)
    h[4:12] = b"n+2\0\r\n\x1a\n"
    struct.pack_into("<hh", h, 12, code, bits)
    struct.pack_into("<8q", h, 16, len(dims), *dims, *([1] * (7 - len(dims))))
    struct.pack_into("<8d", h, 104, 1.0, 1, 1, 1, 1, 1, 1, 1)
    struct.pack_into("<q", h, 168, 544)
    struct.pack_into("<i", h, 348, 1)
    struct.pack_into("<4d", h, 400, 1, 0, 0, 0)
    struct.pack_into("<4d", h, 432, 0, 1, 0, 0)
    struct.pack_into("<4d", h, 464, 0, 0, 1, 0)
    return bytes(h) + b"\0\0\0\0" + struct.pack("<" + fmt * len(values), *values)


put("nifti", "uint8_4x3x2.nii", nifti1([4, 3, 2], 2, 8, "B", [i % 3 for i in range(24)]))
put("nifti", "int16_slope.nii", nifti1([3, 3, 3], 4, 16, "h", [i - 10 for i in range(27)], slope=0.5, inter=-1))
put("nifti", "float32_2d.nii", nifti1([5, 4], 16, 32, "f", [0.25 * i for i in range(20)]))
put("nifti", "int16_big_endian.nii", nifti1([3, 2, 2], 4, 16, "h", [i * 100 - 500 for i in range(12)], order=">"))
put("nifti", "float64_nifti2.nii", nifti2([2, 2, 3], 64, 64, "d", [float(i) for i in range(12)]))

# Inputs that once crashed niftilib (found by this fuzzer; kept as regressions):
# a NIfTI-2 header with dim[0] = 21898, and a byte-swapped NIfTI-2 header.
h = bytearray(nifti2([2, 2, 3], 64, 64, "d", [0.0] * 12))
struct.pack_into("<q", h, 16, 21898)
put("nifti", "regress_dim0_21898.nii", bytes(h))
h = bytearray(nifti2([2, 2, 3], 64, 64, "d", [0.0] * 12))
h[0:4] = struct.pack(">i", 540)
put("nifti", "regress_swapped_nifti2.nii", bytes(h))

lines = lambda *a: "\n".join(a)
put("command_line", "train_unet", lines("train", "--model", "unet3d", "--input-size", "48", "--spatial", "2x2x1",
                                        "--batch-size", "4", "--loss", "ce+dice", "--class-weights", "0.2,1,3"))
put("command_line", "train_mlperf", lines("train", "--lr-schedule", "mlperf", "--decay-boundaries", "100,200",
                                          "--decay-factors", "0.25,0.125", "--halo-overlap=off", "--allreduce-overlap=off", "--threads", "2"))
put("command_line", "predict", lines("predict", "--init", "w.safetensors", "--input", "c.h5", "--out", "p.h5",
                                     "--spatial", "1x2x1", "--window-overlap", "0.5"))
put("command_line", "generate", lines("generate", "--out", "d", "--size", "64", "--kind", "segmentation"))
put("command_line", "preprocess", lines("preprocess", "--in", "d", "--out", "s", "--sample-size", "32", "--chunk", "8"))
put("command_line", "train_config", "train\n--lr\n0.1\0# run\nmodel = \"cosmoflow\"\nspatial = 2x1x1\n"
    "decay-boundaries = [10, 20]\nbatchnorm = true\n[train]\nsteps = 5 ; five\n[predict]\nwindow-overlap = 0.25\n")

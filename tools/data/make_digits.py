#!/usr/bin/env python3
"""Writes crates/rlx-train/data/digits.bin from the UCI "Optical Recognition of
Handwritten Digits" test set as scikit-learn ships it (sklearn/datasets/data/digits.csv.gz
in the scikit-learn wheel; 1797 images of 8x8 pixels, values 0..16, labels 0..9).

    pip download --no-deps scikit-learn -d /tmp/skl
    python3 tools/data/make_digits.py /tmp/skl/scikit_learn-*.whl

Format: 1797 records of 65 bytes, the 64 pixels in row-major order then the label.
Source: E. Alpaydin, C. Kaynak, UCI Machine Learning Repository (CC BY 4.0).
"""
import gzip
import io
import sys
import zipfile

import numpy as np

with zipfile.ZipFile(sys.argv[1]) as z:
    raw = gzip.decompress(z.read("sklearn/datasets/data/digits.csv.gz"))
data = np.loadtxt(io.BytesIO(raw), delimiter=",").astype(np.uint8)
assert data.shape == (1797, 65) and data[:, :64].max() <= 16 and data[:, 64].max() == 9
data.tofile("crates/rlx-train/data/digits.bin")
print("wrote", data.shape, "counts per class", np.bincount(data[:, 64]).tolist())

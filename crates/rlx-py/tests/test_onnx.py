"""rlx.onnx.load on a real model (MiniLM-L3 from tools/fetch_onnx_models.sh) against
onnxruntime in the same run, and the README example."""

import pathlib
import re

import numpy as np
import pytest

import rlx
from conftest import MODELS, ROOT, need


def test_minilm_matches_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    path = need(MODELS / "onnx-models" / "minilm.onnx")
    model = rlx.onnx.load(path)
    assert model.input_names[:2] == ["input_ids", "attention_mask"]
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 30000, (2, 7)).astype(np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    feeds = {k: v for k, v in feeds.items() if k in model.input_names}
    if "token_type_ids" in model.input_names:
        feeds["token_type_ids"] = np.zeros_like(ids)
    got = model.run(feeds)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert np.allclose(g, w, rtol=1e-4, atol=1e-4), np.abs(g - w).max()
    with pytest.raises(rlx.Error, match="input_ids"):
        model.run({"attention_mask": feeds["attention_mask"]})


def test_readme_example_runs():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert blocks, "README.md has a ```python example"
    scope = {}
    exec(compile(blocks[0], "README.md", "exec"), scope)  # noqa: S102 (our own README)

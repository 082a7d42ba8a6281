"""`rlx train`'s files read by the tools people share them with: the checkpoint's
params.safetensors by the `safetensors` package (the same values a resumed run starts
from), the TensorBoard event files by TensorBoard's own reader (CRC-checked records, the
scalars the metrics file holds)."""

import json
import subprocess

import numpy as np
from safetensors.numpy import load_file
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def test_checkpoint_and_tensorboard_files_load_in_their_tools(rlx_cli, tmp_path):
    run = subprocess.run(
        [str(rlx_cli), "train", "mlp", "--epochs", "2", "--batch", "32",
         "--save", str(tmp_path / "ckpt"), "--tensorboard", str(tmp_path / "tb"),
         "--metrics", str(tmp_path / "m.jsonl"), "--plot", str(tmp_path / "p.png")],
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr

    params = load_file(str(tmp_path / "ckpt" / "params.safetensors"))
    shapes = {k: v.shape for k, v in params.items()}
    assert shapes == {"fc1.w": (64, 512), "fc1.b": (512,), "fc2.w": (512, 10), "fc2.b": (10,)}
    assert all(v.dtype == np.float32 and np.isfinite(v).all() for v in params.values())
    moments = load_file(str(tmp_path / "ckpt" / "optimizer.safetensors"))
    assert sorted(moments) == sorted(f"moment{k}/{n}" for k in (0, 1) for n in shapes)
    meta = json.loads((tmp_path / "ckpt" / "meta.json").read_text())
    assert meta["optimizer"]["state"]["step"] == 2 * (1438 // 32) and meta["run"]["epoch"] == 2

    lines = [json.loads(l) for l in (tmp_path / "m.jsonl").read_text().splitlines()]
    steps = [l for l in lines if l["kind"] == "step"]
    epochs = [l for l in lines if l["kind"] == "epoch"]
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    loss = events.Scalars("train/loss")
    assert [e.step for e in loss] == [s["step"] for s in steps]
    assert np.allclose([e.value for e in loss], [s["loss"] for s in steps], rtol=0, atol=0)
    accuracy = events.Scalars("held_out/accuracy")
    assert [e.step for e in accuracy] == [e["step"] for e in epochs]
    assert np.allclose([e.value for e in accuracy], [e["held_out_accuracy"] for e in epochs], rtol=1e-7)

"""Shared fixtures: the model files the LLM and ONNX tests read (fetched by tools/test.sh
into ~/.cache/rlx), and the `rlx` CLI binary the LLM tests compare with."""

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
MODELS = pathlib.Path(os.environ.get("RLX_MODELS", pathlib.Path.home() / ".cache" / "rlx"))
REQUIRE = os.environ.get("RLX_REQUIRE_MODEL") == "1"


def need(path: pathlib.Path) -> pathlib.Path:
    """`path`, or skip (fail under RLX_REQUIRE_MODEL=1) when it is missing."""
    if not path.exists():
        if REQUIRE:
            pytest.fail(f"{path} is missing (tools/fetch_model.sh / fetch_onnx_models.sh fetch it)")
        pytest.skip(f"{path} is missing")
    return path


@pytest.fixture(scope="session")
def smollm2():
    return need(MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.fixture(scope="session")
def rlx_cli():
    """The CLI binary: $RLX_BIN, else the newest of target/{release,debug}/rlx."""
    if "RLX_BIN" in os.environ:
        return pathlib.Path(os.environ["RLX_BIN"])
    found = [p for p in (ROOT / "target" / "release" / "rlx", ROOT / "target" / "debug" / "rlx") if p.exists()]
    if not found:
        pytest.fail("no rlx binary: build it with cargo build -p rlx-cli (tools/test.sh does)")
    return max(found, key=lambda p: p.stat().st_mtime)

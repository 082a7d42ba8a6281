"""ONNX models: ``rlx.onnx.load(path, device="cpu")`` returns an ``rlx.OnnxModel`` whose
``run({name: array})`` returns the outputs in graph order. Opsets 7 to 24 of the default
domain; a model compiles once per distinct input shape (cached)."""

from ._rlx import OnnxModel, onnx_load


def load(path, device="cpu", threads=None) -> OnnxModel:
    """Loads an ONNX file (with any external data files beside it) for `device`."""
    return onnx_load(str(path), device, threads)


__all__ = ["load", "OnnxModel"]

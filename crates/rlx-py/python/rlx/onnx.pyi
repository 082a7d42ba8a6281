"""Type stubs for ``rlx.onnx``: loading ONNX models (opsets 7 to 24 of the default domain)."""

import os
from typing import Optional, Union

from rlx import OnnxModel as OnnxModel

__all__ = ["load", "OnnxModel"]

def load(path: Union[str, "os.PathLike[str]"], device: str = "cpu", threads: Optional[int] = None) -> OnnxModel:
    """Loads an ONNX file (plus any external data files beside it) for `device` ("cpu" or "gpu")."""

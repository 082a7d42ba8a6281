"""The type stubs (python/rlx/__init__.pyi) name exactly what the module has: every
stubbed function, class, method, property and constant exists at runtime, and every
public runtime name is stubbed."""

import ast
import pathlib

import rlx

STUB = pathlib.Path(rlx.__file__).with_name("__init__.pyi")


def stubbed():
    tree = ast.parse(STUB.read_text())
    top, members = set(), {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            top.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            top.add(node.target.id)
        if isinstance(node, ast.ClassDef):
            members[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
    return {n for n in top if not n.startswith("_") or n == "__version__"}, members


def test_stubs_match_the_module():
    top, members = stubbed()
    assert STUB.exists()
    assert sorted(n for n in top if not hasattr(rlx, n)) == []
    for cls, names in members.items():
        missing = [n for n in names if not hasattr(getattr(rlx, cls), n)]
        assert missing == [], (cls, missing)
    public = {n for n in dir(rlx) if not n.startswith("_") and n not in ("onnx",)}
    assert sorted(public - top) == []

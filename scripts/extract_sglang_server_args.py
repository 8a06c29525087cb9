"""Extract SGLang's real `launch_server` argument names from its source, without importing it.

Why: tandem builds `python -m sglang.launch_server ...` command lines, and a flag SGLang
does not know makes the engine die at startup on the GPU node, far from where the mistake
was made. SGLang itself cannot be imported on a CPU-only machine (it pulls CUDA kernels),
so this reads the source with `ast` and records every flag with how it takes its value.
The output (tandem/engine/sglang_server_args.txt) is what tandem/engine/sglang_launch.py checks
every emitted flag against (tests/test_sglang_launch.py too); re-run it when the SGLang pin moves.

    pip download sglang==X --no-deps -d /tmp/sgl
    python scripts/extract_sglang_server_args.py /tmp/sgl/sglang-X-*.whl > tandem/engine/sglang_server_args.txt

Rules mirror SGLang 0.5.x `arg_groups/arg_utils.add_cli_args_from_dataclass`: every field
annotated `A[T, "help"]` or `A[T, Arg(...)]` in the namespaces of `arg_groups/fields/`
becomes `--field-name` (or Arg.cli_name) plus Arg.aliases, unless Arg(no_cli=True); bools
are store_true flags; lists without a type_parser take several values; an explicit
argparse.BooleanOptionalAction also accepts `--no-<flag>`. Flags registered by hand in
`ServerArgs.add_cli_args` are read from its `parser.add_argument(...)` calls.
"""

from __future__ import annotations

import ast
import hashlib
import sys
import zipfile
from pathlib import Path

FLAG_ACTIONS = {"store_true", "store_false", "store_const", "DeprecatedStoreTrueAction", "DeprecatedStoreConstAction"}


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return ""


def _kwargs(call: ast.Call) -> dict[str, ast.AST]:
    return {kw.arg: kw.value for kw in call.keywords if kw.arg}


def _is_bool(type_node: ast.AST) -> bool:
    if _name(type_node) == "bool":
        return True
    # Optional[bool]
    if isinstance(type_node, ast.Subscript) and _name(type_node.value) == "Optional":
        return _name(type_node.slice) == "bool"
    return False


def _is_list(type_node: ast.AST) -> bool:
    node = type_node
    if isinstance(node, ast.Subscript) and _name(node.value) == "Optional":
        node = node.slice
    return isinstance(node, ast.Subscript) and _name(node.value) in ("List", "list")


def _kind_from_action(action: ast.AST) -> str:
    name = _name(action)
    if name == "BooleanOptionalAction":
        return "bool_optional"
    if name in FLAG_ACTIONS:
        return "flag"
    if name == "LoRAPathAction":
        return "list"
    return "value"


def fields_flags(source: str) -> dict[str, str]:
    """Flags of every `A[...]`-annotated field in one arg_groups/fields module."""
    out: dict[str, str] = {}
    for cls in ast.walk(ast.parse(source)):
        if not isinstance(cls, ast.ClassDef):
            continue
        for stmt in cls.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            ann = stmt.annotation
            if not (isinstance(ann, ast.Subscript) and _name(ann.value) in ("A", "Annotated")):
                continue
            elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else []
            if len(elts) < 2:
                continue
            type_node, meta = elts[0], elts[1]
            field = stmt.target.id
            if isinstance(meta, ast.Constant) and isinstance(meta.value, str):
                kw: dict[str, ast.AST] = {}
            elif isinstance(meta, ast.Call) and _name(meta.func) == "Arg":
                kw = _kwargs(meta)
            else:
                continue  # not auto-registered
            if isinstance(kw.get("no_cli"), ast.Constant) and kw["no_cli"].value is True:
                continue
            cli = kw["cli_name"].value if isinstance(kw.get("cli_name"), ast.Constant) else "--" + field.replace("_", "-")
            names = [cli]
            if isinstance(kw.get("aliases"), (ast.List, ast.Tuple)):
                names += [e.value for e in kw["aliases"].elts if isinstance(e, ast.Constant)]
            if "action" in kw:
                kind = _kind_from_action(kw["action"])
            elif _is_bool(type_node):
                kind = "flag"
            elif _is_list(type_node) and "type_parser" not in kw:
                kind = "list"
            else:
                kind = "value"
            for n in names:
                out[n] = kind
    return out


def manual_flags(source: str) -> dict[str, str]:
    """Flags added by hand with parser.add_argument(...) in server_args.py."""
    out: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and _name(node.func) == "add_argument":
            names = [a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
            kw = _kwargs(node)
            kind = _kind_from_action(kw["action"]) if "action" in kw else ("list" if isinstance(kw.get("nargs"), ast.Constant) and kw["nargs"].value in ("+", "*") else "value")
            for n in names:
                out[n] = kind
    return out


def extract(files: dict[str, str]) -> dict[str, str]:
    flags: dict[str, str] = {}
    for path, text in sorted(files.items()):
        if "/arg_groups/fields/" in path:
            flags.update(fields_flags(text))
    flags.update(manual_flags(files["sglang/srt/server_args.py"]))
    return flags


def read_sources(src: Path) -> tuple[dict[str, str], str]:
    wanted = lambda p: p == "sglang/srt/server_args.py" or (p.startswith("sglang/srt/arg_groups/fields/") and p.endswith(".py"))
    if src.suffix == ".whl":
        with zipfile.ZipFile(src) as zf:
            files = {n: zf.read(n).decode() for n in zf.namelist() if wanted(n)}
        origin = f"{src.name} sha256={hashlib.sha256(src.read_bytes()).hexdigest()}"
    else:  # an unpacked tree holding sglang/
        files = {str(p.relative_to(src)): p.read_text() for p in src.rglob("*.py") if wanted(str(p.relative_to(src)))}
        origin = str(src)
    if "sglang/srt/server_args.py" not in files:
        raise SystemExit(f"{src}: no sglang/srt/server_args.py inside")
    return files, origin


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit("usage: extract_sglang_server_args.py SGLANG_WHEEL_OR_TREE")
    files, origin = read_sources(Path(argv[0]))
    flags = extract(files)
    print(f"# SGLang launch_server flags, extracted by scripts/extract_sglang_server_args.py from {origin}")
    print("# kind: value (takes one value), flag (store_true-like), bool_optional (also --no-X), list (one or more values)")
    for name in sorted(flags):
        print(f"{name}\t{flags[name]}")


if __name__ == "__main__":
    main(sys.argv[1:])

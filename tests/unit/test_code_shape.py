"""Code shape limits (issue 13): modules stay under 700 lines and functions under 80.

The Python part covers probe/, probe_wire/ and sidecar/ (ast: every def, nested ones too).
The JavaScript part covers the standalone page (sidecar/static/{page,shared}/*.js, less the generated contract.js) and
the DSH plugin's sources (dsh_plugin/src/client/*, dsh_plugin/host/*.js; never the built dist/).
Run this file as a script to print the longest functions per file.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

MODULE_MAX_LINES = 700
FUNCTION_MAX_LINES = 80
JS_MODULE_MAX_LINES = MODULE_MAX_LINES
JS_FUNCTION_MAX_LINES = FUNCTION_MAX_LINES
PY_PACKAGES = ("probe", "probe_wire", "sidecar")
JS_GLOBS = (
    "sidecar/static/page/*.js",
    "sidecar/static/shared/*.js",
    "dsh_plugin/src/client/*.js",
    "dsh_plugin/src/client/*.jsx",
    "dsh_plugin/host/*.js",
)
JS_EXCLUDED = {"sidecar/static/shared/contract.js"}  # generated from sidecar/documents/contract.py

# Where a named function starts: `function name(`, `const name = (...) =>` / `= function`, a class method.
_JS_FUNCTION = re.compile(r"^(?:export\s+)?(?:default\s+)?(?:async\s+)?function\s*\*?\s*(\w+)\s*\(")
_JS_ARROW = re.compile(
    r"^(?:export\s+)?(?:const|let|var)\s+(\w+)\s*=\s*(?:async\s+)?(?:function\b|\w+\s*=>|\((?:[^()]|\([^()]*\))*\)\s*=>|\($)"
)
_JS_METHOD = re.compile(
    r"^(?:static\s+)?(?:async\s+)?(?!(?:if|for|while|switch|catch|function|return)\b)(\w+)\s*\([^()]*\)\s*\{$"
)
_CLOSER = re.compile(r"^[}\])]")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def js_sources() -> list[Path]:
    """The JavaScript files the limits apply to."""
    found: set[Path] = set()
    for pattern in JS_GLOBS:
        found.update(p for p in REPO.glob(pattern) if p.relative_to(REPO).as_posix() not in JS_EXCLUDED)
    return sorted(found)


def js_functions(text: str) -> list[tuple[str, int, int, int]]:
    """(name, first line, line count, indent) of every named function in prettier-style JavaScript.

    A function runs from the line that names it to the line at its own indentation that closes it
    (`}`, `)`, `]`), or, for an expression body, to the last line indented deeper than its start.
    """
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        stripped = line.strip()
        m = _JS_FUNCTION.match(stripped) or _JS_ARROW.match(stripped)
        if not m and _indent(line) > 0:
            m = _JS_METHOD.match(stripped)
        if not m:
            continue
        own = _indent(line)
        end = i
        for j in range(i + 1, len(lines)):
            if not lines[j].strip():
                continue
            if _indent(lines[j]) <= own:
                if _CLOSER.match(lines[j].lstrip()):
                    end = j
                break
            end = j
        found.append((m.group(1), i + 1, end - i + 1, own))
    return found


def js_shape_report() -> dict[str, tuple[int, list[tuple[str, int, int, int]]]]:
    """Relative path -> (line count, functions longest first)."""
    report = {}
    for path in js_sources():
        text = path.read_text(encoding="utf-8")
        funcs = sorted(js_functions(text), key=lambda f: -f[2])
        report[path.relative_to(REPO).as_posix()] = (len(text.splitlines()), funcs)
    return report


def test_js_checker_finds_functions():
    src = (
        "function a(x) {\n  return x\n}\n"
        "export const B = ({ p }) => {\n  const c = (y) =>\n    y + 1\n  return c(p)\n}\n"
        "class K {\n  render() {\n    return 1\n  }\n}\n"
    )
    got = {name: count for name, _, count, _ in js_functions(src)}
    assert got == {"a": 3, "B": 5, "c": 2, "render": 3}


def test_js_modules_and_functions_stay_small():
    report = js_shape_report()
    assert report, "no JavaScript sources found"
    too_long = [
        f"{path}: {count} lines" for path, (count, _) in report.items() if count > JS_MODULE_MAX_LINES
    ]
    long_funcs = [
        f"{path}:{first} {name}: {count} lines"
        for path, (_, funcs) in report.items()
        for name, first, count, _indent_ in funcs
        if count > JS_FUNCTION_MAX_LINES
    ]
    assert not too_long, f"JS modules over {JS_MODULE_MAX_LINES} lines: {too_long}"
    assert not long_funcs, f"JS functions over {JS_FUNCTION_MAX_LINES} lines: {long_funcs}"


if __name__ == "__main__":
    top = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    for rel, (count, funcs) in js_shape_report().items():
        longest = ", ".join(f"{name}@{first}={n}" for name, first, n, _ in funcs[:top])
        print(f"{count:5d} {rel}: {longest}")


def py_shape_report() -> list[str]:
    """Every Python module over MODULE_MAX_LINES and function over FUNCTION_MAX_LINES lines."""
    import ast

    out = []
    for package in PY_PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            rel = path.relative_to(REPO)
            if text.count("\n") > MODULE_MAX_LINES:
                out.append(f"{rel}: {text.count(chr(10))} lines")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > FUNCTION_MAX_LINES:
                        out.append(f"{rel}:{node.lineno} {node.name}: {lines} lines")
    return out


def test_python_modules_and_functions_stay_small():
    assert not py_shape_report(), "split these along what they do:\n" + "\n".join(py_shape_report())

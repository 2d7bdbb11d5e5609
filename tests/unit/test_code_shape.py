"""Code shape limits: modules stay under 700 lines and functions under 80; the probe's own
modules import one another in one direction.

The Python part covers hostfs/, probe/, probe_wire/ and sidecar/ (ast: every def, nested ones too). The
complexity lint (C901, PLR0912, PLR0915) is ruff's, configured in pyproject.toml; so is BLE001, whose
every `noqa` says why here.
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
PY_PACKAGES = ("hostfs", "probe", "probe_wire", "sidecar")
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


def py_shape_report(root: Path = REPO, packages: tuple[str, ...] = PY_PACKAGES) -> list[str]:
    """Every Python module over MODULE_MAX_LINES and function over FUNCTION_MAX_LINES lines."""
    import ast

    out = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            rel = path.relative_to(root)
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


def test_the_python_shape_check_reports_a_long_module_and_a_long_function(tmp_path):
    """The control for the test above: a module of 701 lines and a function of 81 are reported, one
    of 700 lines and a function of 80 are not."""
    body = "".join(f"    x{i} = {i}\n" for i in range(78))
    long_fn = "def long_one():\n" + body + "    x78 = 78\n    return x0\n"
    ok_fn = "def fine_one():\n" + body + "    return x0\n"
    pkg = tmp_path / "scratch"
    pkg.mkdir()
    (pkg / "funcs.py").write_text(long_fn + "\n\n" + ok_fn)
    (pkg / "long.py").write_text("x = 1\n" * (MODULE_MAX_LINES + 1))
    (pkg / "edge.py").write_text("x = 1\n" * MODULE_MAX_LINES)
    report = py_shape_report(tmp_path, ("scratch",))
    assert report == ["scratch/funcs.py:1 long_one: 81 lines", f"scratch/long.py: {MODULE_MAX_LINES + 1} lines"]


# ruff's BLE001 (pyproject.toml) refuses a blind `except Exception` unless a noqa lets it through,
# which must then say why the except cannot name what it catches: `noqa: BLE001 -- why`.
BLIND_EXCEPT_DIRS = (*PY_PACKAGES, "scripts", "tests", "benchmarks")
_BLIND_NOQA = re.compile(r"#\s*noqa:[\w, ]*\bBLE001\b(?P<rest>.*)$")
_A_REASON = re.compile(r"^[\w, ]*\s+--\s+\S")


def blind_excepts_without_a_reason(root: Path = REPO, dirs: tuple[str, ...] = BLIND_EXCEPT_DIRS) -> list[str]:
    out = []
    for top in dirs:
        for path in sorted((root / top).rglob("*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                found = _BLIND_NOQA.search(line)
                if found and not _A_REASON.match(found["rest"]):
                    out.append(f"{path.relative_to(root)}:{number}")
    return out


def test_every_blind_except_says_why():
    assert not blind_excepts_without_a_reason(), "say why these must catch everything:\n" + "\n".join(
        blind_excepts_without_a_reason()
    )


def test_the_blind_except_check_reports_a_noqa_without_a_reason(tmp_path):
    (tmp_path / "scratch").mkdir()
    blind = "# noqa: " + "BLE001"  # spelt in two parts: this file's own lines are checked too
    (tmp_path / "scratch" / "m.py").write_text(
        "try:\n    pass\n"
        f"except Exception:  {blind}\n    pass\n"
        f"except Exception:  {blind} -- never raises into the caller\n    pass\n"
        f"except Exception:  {blind}, E722\n    pass\n"
        f"except Exception:  {blind.replace(': ', ': E722, ')} -- a reason\n    pass\n"
    )
    assert blind_excepts_without_a_reason(tmp_path, ("scratch",)) == ["scratch/m.py:3", "scratch/m.py:7"]


def probe_import_graph(package_dir: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports, anywhere in it: at the top, inside
    functions, under TYPE_CHECKING. ``from pkg import name`` is an import of ``pkg.name`` when that is
    a module, else of the package itself (its __init__)."""
    import ast

    package = package_dir.name
    modules = {p.stem for p in package_dir.glob("*.py")}

    def module_name(stem: str) -> str:
        return package if stem == "__init__" else f"{package}.{stem}"

    graph: dict[str, set[str]] = {}
    for path in sorted(package_dir.glob("*.py")):
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name.split(".")[0] == package)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module == package:
                    edges.update(module_name(a.name) if a.name in modules else package for a in node.names)
                elif node.module.split(".")[0] == package:
                    edges.add(node.module)
        me = module_name(path.stem)
        graph[me] = edges - {me}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_probe_s_modules_import_one_another_in_one_direction():
    """The order drawn in probe/__init__.py: no module of the probe imports one above it, even
    inside a function or for type checking only."""
    cycles = import_cycles(probe_import_graph(REPO / "probe"))
    assert cycles == [], f"import cycles in probe/: {cycles}"


def test_the_cycle_check_finds_a_cycle_through_a_function_level_import(tmp_path):
    """The control for the test above."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pkg.a import A\n")
    (pkg / "a.py").write_text("from pkg import b\nA = 1\n")
    (pkg / "b.py").write_text("def f():\n    from pkg import a\n    return a.A\n")
    (pkg / "c.py").write_text("import pkg.b\n")
    graph = probe_import_graph(pkg)
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": {"pkg.b"}}
    assert import_cycles(graph) == [["pkg.a", "pkg.b"]]

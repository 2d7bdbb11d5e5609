"""docs/performance.md and docs/reliability.md stay what their reader needs.

performance.md: targets, current figures and the command that reproduces each, in at most 2,000
words, with no commit hash (git holds how a figure was reached). reliability.md: fault, what holds,
the test; every test it names exists (file, test function, each word of a `-k` expression, a quoted
fragment of a node test's title), and every row of its tables names one. In both docs each
`benchmarks/*.py` command exists and takes the flags and modes it is given. Every link into either
doc's headings finds its heading.

Each checker is tried on a planted wrong reference too, so a checker that finds nothing fails.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PERFORMANCE = REPO / "docs" / "performance.md"
RELIABILITY = REPO / "docs" / "reliability.md"
PERFORMANCE_MAX_WORDS = 2000

# A commit hash as a reader would paste one: 7 to 40 hex digits, not all of them decimal.
_HEX_TOKEN = re.compile(r"(?<![\w/.-])[0-9a-fA-F]{7,40}(?![\w/-])")
_SPAN = re.compile(r"`([^`]*)`")
# A test reference in a backtick span: a path from the repository root, then `::name` or `-k EXPR`.
_PY_REF = re.compile(r"(?P<path>(?:[\w.-]+/)*test_\w+\.py)(?:::(?P<name>\w+))?(?P<rest>.*)")
_CONTINUATION = re.compile(r"^::(\w+)$")
_K_EXPR = re.compile(r"-k\s+(\"[^\"]*\"|\S+)")
_JS_REF = re.compile(r"^(dsh_plugin/test/[\w.-]+\.test\.mjs)$")
_JS_FRAGMENT = re.compile(r'\s*\("([^"]+)"\)')
_JS_TITLE = re.compile(r"""\b(?:test|describe|it)\(\s*(['"`])(.*?)\1""")
_BENCH = re.compile(r"benchmarks/(\w+)\.py((?:[ \t]+[^\s#|`'\"]+)*)")
_LINK = re.compile(r"\]\(([^)#\s]*?)(performance|reliability)\.md#([\w-]+)\)")


def words(text: str) -> int:
    """What `wc -w` counts."""
    return len(text.split())


def commit_like_tokens(text: str) -> list[str]:
    return [t for t in _HEX_TOKEN.findall(text) if not t.isdigit()]


def _test_names(path: Path) -> set[str]:
    """Names pytest collects from a file: module-level test functions, classes and their methods."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            names.update(n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return names


def _check_python_ref(repo: Path, span: str, last: Path | None) -> tuple[Path | None, list[str]]:
    """(the file this span names, problems) for one backtick span of a doc line."""
    follow = _CONTINUATION.match(span)
    if follow:
        if last is None:
            return None, [f"`{span}`: no file before it on its line"]
        missing = (
            []
            if follow.group(1) in _test_names(last)
            else [f"{last.relative_to(repo)}::{follow.group(1)}: no such test"]
        )
        return last, missing
    m = _PY_REF.search(span)
    if not m:
        return last, []
    path = repo / m.group("path")
    if "/" not in m.group("path") or not path.is_file():
        return None, [f"`{span}`: {m.group('path')} is not a file (paths from the repository root)"]
    names = _test_names(path)
    problems = []
    if m.group("name") and m.group("name") not in names:
        problems.append(f"{m.group('path')}::{m.group('name')}: no such test")
    k = _K_EXPR.search(m.group("rest"))
    for word in re.findall(r"\w+", k.group(1)) if k else []:
        if word not in {"and", "or", "not"} and not any(word in n for n in names):
            problems.append(f"{m.group('path')} -k {word}: matches no test")
    return path, problems


def _check_js_ref(repo: Path, span: str, after: str) -> list[str]:
    m = _JS_REF.match(span)
    if not m:
        return []
    path = repo / m.group(1)
    if not path.is_file():
        return [f"{m.group(1)}: no such file"]
    fragment = _JS_FRAGMENT.match(after)
    titles = [t for _, t in _JS_TITLE.findall(path.read_text(encoding="utf-8"))]
    if fragment and not any(fragment.group(1) in t.replace("\\'", "'") for t in titles):
        return [f'{m.group(1)} ("{fragment.group(1)}"): no test or describe title holds it']
    return []


def missing_tests(repo: Path, text: str) -> list[str]:
    """Every test a doc names that does not exist, one line each."""
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        last: Path | None = None
        for m in _SPAN.finditer(line):
            span = m.group(1).strip()
            last, found = _check_python_ref(repo, span, last)
            found += _check_js_ref(repo, span, line[m.end() :])
            problems += [f"line {number}: {p}" for p in found]
    return problems


def rows_without_a_test(repo: Path, text: str) -> list[str]:
    """Rows of tables whose last column is `test` that name no existing test file."""
    missing, in_test_table = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if not line.startswith("|"):
            in_test_table = False
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not in_test_table:
            in_test_table = cells[-1] == "test"
            continue
        if set(cells[-1]) <= {"-"}:
            continue
        files = [
            repo / p for p in re.findall(r"`((?:tests|dsh_plugin/test)/[\w/.-]+\.(?:py|mjs))", cells[-1])
        ]
        if not any(f.is_file() for f in files):
            missing.append(f"line {number}: {cells[0][:60]}")
    return missing


def benchmark_problems(repo: Path, text: str) -> list[str]:
    """Each `benchmarks/NAME.py ARGS` must exist and know each flag and bare word it is given."""
    problems = []
    for m in _BENCH.finditer(text):
        script = repo / "benchmarks" / f"{m.group(1)}.py"
        if not script.is_file():
            problems.append(f"benchmarks/{m.group(1)}.py: no such script")
            continue
        source = script.read_text(encoding="utf-8")
        args = m.group(2).split()
        for i, arg in enumerate(args):
            if arg == "--":  # what follows is the command the script runs
                break
            if arg.startswith("--") and f'"{arg.split("=")[0]}"' not in source:
                problems.append(f"benchmarks/{m.group(1)}.py: no flag {arg}")
            elif (
                re.fullmatch(r"[a-z]+", arg)
                and not (i and args[i - 1].startswith("--"))
                and f'"{arg}"' not in source
            ):
                problems.append(f"benchmarks/{m.group(1)}.py: no mode {arg}")
    return problems


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def broken_anchors(repo: Path) -> list[str]:
    slugs = {
        name: {
            _slug(h)
            for h in re.findall(
                r"^#+\s+(.*)$", (repo / "docs" / f"{name}.md").read_text(encoding="utf-8"), re.M
            )
        }
        for name in ("performance", "reliability")
    }
    broken = []
    for md in [*repo.glob("*.md"), *repo.glob("docs/*.md"), *repo.glob("benchmarks/*.md")]:
        for m in _LINK.finditer(md.read_text(encoding="utf-8")):
            if m.group(3) not in slugs[m.group(2)]:
                broken.append(f"{md.relative_to(repo)}: {m.group(2)}.md#{m.group(3)}")
    return broken


def test_performance_md_is_at_most_2000_words():
    assert words(PERFORMANCE.read_text(encoding="utf-8")) <= PERFORMANCE_MAX_WORDS


def test_performance_md_names_no_commit():
    assert commit_like_tokens(PERFORMANCE.read_text(encoding="utf-8")) == []


def test_every_test_the_docs_name_exists():
    for doc in (RELIABILITY, PERFORMANCE):
        assert missing_tests(REPO, doc.read_text(encoding="utf-8")) == [], doc.name


def test_every_fault_in_reliability_md_names_its_test():
    text = RELIABILITY.read_text(encoding="utf-8")
    assert text.count("| test |") >= 8, "reliability.md's tables end in a `test` column"
    assert rows_without_a_test(REPO, text) == []


def test_every_benchmark_command_exists_with_its_flags():
    for doc in (PERFORMANCE, RELIABILITY):
        assert benchmark_problems(REPO, doc.read_text(encoding="utf-8")) == [], doc.name


def test_links_into_the_two_docs_find_their_headings():
    assert broken_anchors(REPO) == []


def test_the_checkers_find_what_is_wrong(tmp_path):
    """Each checker flags a planted fault, so an empty answer above means something."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_real():\n    pass\n")
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "b.py").write_text(
        'ap.add_argument("what", choices=["run"])\nap.add_argument("--n")\n'
    )
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "performance.md").write_text("# Perf\n## The probe\n")
    (tmp_path / "docs" / "reliability.md").write_text("# Rel\n")
    (tmp_path / "README.md").write_text("[a](docs/performance.md#the-probe) [b](docs/performance.md#gone)\n")

    assert words("a b\nc") == 3
    assert commit_like_tokens("before commit 469a36b, 1234567 polls, deadbeef0") == ["469a36b", "deadbeef0"]
    assert missing_tests(
        tmp_path, "`tests/test_a.py::test_real`, `::test_gone`, `tests/test_a.py -k real`"
    ) == ["line 1: tests/test_a.py::test_gone: no such test"]
    assert (
        len(missing_tests(tmp_path, "`test_a.py::test_real` `tests/test_a.py -k nothing`\n`::test_real`"))
        == 3
    )
    rows = "| fault | what holds | test |\n|---|---|---|\n| a | b | `tests/test_a.py` |\n| c | d | `tests/test_b.py` |\n"
    assert rows_without_a_test(tmp_path, rows) == ["line 4: c"]
    assert benchmark_problems(
        tmp_path, "benchmarks/b.py run --n 3\nbenchmarks/b.py walk --m\nbenchmarks/c.py"
    ) == [
        "benchmarks/b.py: no mode walk",
        "benchmarks/b.py: no flag --m",
        "benchmarks/c.py: no such script",
    ]
    assert broken_anchors(tmp_path) == ["README.md: performance.md#gone"]

"""docs/performance.md, docs/reliability.md and docs/design.md stay what their reader needs;
docs/README.md indexes every page.

performance.md: targets, current figures and the command that reproduces each, in at most 2,000
words, with no commit hash (git holds how a figure was reached). reliability.md: fault, what holds,
the test; every test it names exists (file, test function, each word of a `-k` expression, a quoted
fragment of a node test's title), and every row of its tables names one. In both docs each
`benchmarks/*.py` command exists and takes the flags and modes it is given. Every link into either
doc's headings finds its heading. design.md: every repository path it names in backticks exists (a
path from the repository root, or a file's bare name), its layers section names every import
contract of pyproject.toml, and every link into its headings finds one.

Each checker is tried on a planted wrong reference too, so a checker that finds nothing fails.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from importlinter.api import read_configuration

REPO = Path(__file__).resolve().parents[2]
PERFORMANCE = REPO / "docs" / "performance.md"
RELIABILITY = REPO / "docs" / "reliability.md"
DESIGN = REPO / "docs" / "design.md"
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
_LINK = re.compile(r"\]\(([^)#\s]*?)(performance|reliability|design)\.md#([\w-]+)\)")
# What names a file by its ending when a backtick span holds one (`format.js`, `sidecar/poll/collect.py`).
_FILE_ENDINGS = (
    ".py",
    ".js",
    ".mjs",
    ".jsx",
    ".md",
    ".json",
    ".toml",
    ".yml",
    ".yaml",
    ".sh",
    ".c",
    ".proto",
)


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
        for name in ("performance", "reliability", "design")
    }
    broken = []
    for md in [*repo.glob("*.md"), *repo.glob("docs/*.md"), *repo.glob("benchmarks/*.md")]:
        for m in _LINK.finditer(md.read_text(encoding="utf-8")):
            if m.group(3) not in slugs[m.group(2)]:
                broken.append(f"{md.relative_to(repo)}: {m.group(2)}.md#{m.group(3)}")
    return broken


def _folders(repo: Path) -> tuple[set[str], set[str]]:
    """The repository's top-level folders, and the names of the folders one level below them."""
    tops = {p.name for p in repo.iterdir() if p.is_dir() and not p.name.startswith(".")}
    return tops, {p.name for top in tops for p in (repo / top).iterdir() if p.is_dir()}


def repo_paths(repo: Path, text: str) -> list[tuple[int, str]]:
    """(line, path) for every backtick span outside code blocks that names a repository path: its first
    word (less a `::test` after it) has a folder of `repo` before its first "/" (a top-level one, or one
    a level below: a path that does not start at the root), or ends like a file (a bare name too)."""
    tops, seconds = _folders(repo)
    found, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        for m in [] if fenced else _SPAN.finditer(line):
            words_ = m.group(1).split()
            token = words_[0].split("::")[0] if words_ else ""
            if token.startswith("/"):
                continue  # a path of the machine's (/proc, /dev/shm), not of the repository
            if ("/" in token and token.split("/")[0] in tops | seconds) or token.endswith(_FILE_ENDINGS):
                found.append((number, token))
    return found


def missing_paths(repo: Path, text: str) -> list[str]:
    """Every repository path a doc names (repo_paths) that is not there, one line each. A path is
    from the repository root (a folder may end in "/", a `*` matches as in a glob); a bare file name
    must be the name of a file somewhere in the repository."""
    tops, _ = _folders(repo)
    names: set[str] | None = None
    problems = []
    for number, token in repo_paths(repo, text):
        if "/" not in token:
            if names is None:
                names = {p.name for p in repo.rglob("*") if p.is_file() and "node_modules" not in p.parts}
            if token not in names:
                problems.append(f"line {number}: {token}: no file of that name")
        elif token.split("/")[0] not in tops:
            problems.append(f"line {number}: {token}: not a path from the repository root")
        elif not (any(repo.glob(token.rstrip("/"))) if "*" in token else (repo / token).exists()):
            problems.append(f"line {number}: {token}: no such path")
    return problems


def undescribed_contracts(pyproject: Path, design: str) -> list[str]:
    """The import contracts of `pyproject`'s [tool.importlinter] whose id design.md's section "The
    sidecar's layers" does not name in backticks."""
    ids = [c["id"] for c in read_configuration(str(pyproject))["contracts_options"]]
    start = design.index("## The sidecar's layers")
    end = design.find("\n## ", start + 1)
    section = design[start : end if end >= 0 else len(design)]
    return [i for i in ids if f"`{i}`" not in section]


def test_design_md_describes_every_import_contract():
    assert undescribed_contracts(REPO / "pyproject.toml", DESIGN.read_text(encoding="utf-8")) == []


def test_every_path_design_md_names_exists():
    text = DESIGN.read_text(encoding="utf-8")
    assert len(repo_paths(REPO, text)) >= 100, "design.md names the tree's files by their paths"
    assert missing_paths(REPO, text) == []


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
    (tmp_path / "docs" / "design.md").write_text("# Design\n## The sidecar's layers\n")
    (tmp_path / "README.md").write_text(
        "[a](docs/performance.md#the-probe) [b](docs/performance.md#gone)\n"
        "[c](docs/design.md#the-sidecars-layers) [d](docs/design.md#the-sidecar-layers)\n"
    )

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
    assert broken_anchors(tmp_path) == [
        "README.md: performance.md#gone",
        "README.md: design.md#the-sidecar-layers",
    ]


def test_the_path_checker_finds_what_is_wrong(tmp_path):
    """A path that moved, one that is not from the root, a misspelt file name: each is caught; paths
    of the machine, code blocks and spans that name no file are left alone. An import contract named
    only outside the layers section, or nowhere, is caught too."""
    (tmp_path / "sidecar" / "poll").mkdir(parents=True)
    (tmp_path / "sidecar" / "poll" / "discovery.py").write_text("")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "design.md").write_text("")
    text = "\n".join(
        [
            "`sidecar/poll/discovery.py` `JobsPoller`, `sidecar/poll/`, `sidecar/poll/*.py`, `discovery.py`",
            "`sidecar/poll/jobs.py` `sidecar/polls/` `poll/discovery.py` `poll/` `jobs.py` `docs/design.md::x`",
            '`/dev/shm/dsh-probe.<pid>` `hostfs.procid` `HostPaths(procfs="/proc")` `a/b` `sidecar.poll`',
            "```",
            "`sidecar/gone.py`",
            "```",
            "`sidecar/poll/discovery.py --help`, `docs/gone.md`",
        ]
    )
    assert [t for _, t in repo_paths(tmp_path, text)][:5] == [
        "sidecar/poll/discovery.py",
        "sidecar/poll/",
        "sidecar/poll/*.py",
        "discovery.py",
        "sidecar/poll/jobs.py",
    ]
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[tool.importlinter]\nroot_packages = ["sidecar"]\n'
        + "".join(
            f'[[tool.importlinter.contracts]]\nid = "{i}"\nname = "{i}"\ntype = "forbidden"\n'
            'source_modules = ["sidecar.poll"]\nforbidden_modules = ["sidecar.cli"]\n'
            for i in ("a-b", "c-d", "e-f")
        )
    )
    design = "## The sidecar's layers\n- `a-b`: ...\n## The path of a fact\n- `c-d`: ...\n"
    assert undescribed_contracts(pyproject, design) == ["c-d", "e-f"]
    assert missing_paths(tmp_path, text) == [
        "line 2: sidecar/poll/jobs.py: no such path",
        "line 2: sidecar/polls/: no such path",
        "line 2: poll/discovery.py: not a path from the repository root",
        "line 2: poll/: not a path from the repository root",
        "line 2: jobs.py: no file of that name",
        "line 7: docs/gone.md: no such path",
    ]


def unindexed_pages(repo: Path) -> list[str]:
    """docs/*.md pages the index (docs/README.md) does not link, and links of the index that lead nowhere."""
    index = (repo / "docs" / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([\w.-]+\.md)(?:#[\w-]+)?\)", index))
    pages = {p.name for p in (repo / "docs").glob("*.md")} - {"README.md"}
    return sorted(pages - linked) + [f"{name}: no such page" for name in sorted(linked - pages)]


def test_the_docs_index_links_every_page() -> None:
    assert unindexed_pages(REPO) == []


def test_the_index_checker_finds_a_page_left_out(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "README.md").write_text("| q | [a.md](a.md) |\n| r | [gone.md](gone.md#x) |\n")
    (tmp_path / "docs" / "a.md").write_text("# A\n")
    (tmp_path / "docs" / "b.md").write_text("# B\n")
    assert unindexed_pages(tmp_path) == ["b.md", "gone.md: no such page"]

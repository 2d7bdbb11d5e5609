"""tests/helpers/dispatch_order.py: files with a slow test go to the workers first, and each file's
tests stay together and in their order."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers.dispatch_order import slow_first, write_alone_ids


@dataclass
class Item:
    path: Path
    name: str
    marks: set[str] = field(default_factory=set)

    @property
    def nodeid(self) -> str:
        return f"{self.path.as_posix()}::{self.name}"

    def get_closest_marker(self, name: str):
        return name if name in self.marks else None


def test_files_with_a_slow_test_go_first_each_file_whole_and_in_order():
    a1, a2 = Item(Path("a.py"), "a1"), Item(Path("a.py"), "a2")
    b1, b2 = Item(Path("b.py"), "b1"), Item(Path("b.py"), "b2", {"slow"})
    c1 = Item(Path("c.py"), "c1")
    d1, d2 = Item(Path("d.py"), "d1", {"slow"}), Item(Path("d.py"), "d2")
    items = [a1, a2, b1, b2, c1, d1, d2]
    slow_first(items)
    assert [i.name for i in items] == ["b1", "b2", "d1", "d2", "a1", "a2", "c1"]


def test_without_slow_tests_the_order_is_kept():
    items = [Item(Path(f"{n}.py"), n) for n in "zyx"]
    slow_first(items)
    assert [i.name for i in items] == ["z", "y", "x"]


def test_the_alone_tests_are_named_one_a_line_for_the_second_phase(tmp_path):
    items = [
        Item(Path("t/a.py"), "a1", {"alone"}),
        Item(Path("t/a.py"), "a2"),
        Item(Path("t/b.py"), "b[600]", {"alone", "slow"}),
    ]
    target = tmp_path / "alone.txt"
    write_alone_ids(items, str(target))
    assert target.read_text(encoding="utf-8").splitlines() == ["t/a.py::a1", "t/b.py::b[600]"]
    assert [p.name for p in tmp_path.iterdir()] == ["alone.txt"]  # no temporary file left
    write_alone_ids([items[1]], str(target))  # none marked: an empty file (the second phase runs none)
    assert target.read_text(encoding="utf-8") == ""


def test_without_a_target_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_alone_ids([Item(Path("a.py"), "a1", {"alone"})], None)
    assert list(tmp_path.iterdir()) == []

"""The probe's payload: schema 1, written once here, and everything derived from it.

The payload is a msgpack map (docs/design.md, "Probe payload"). This module holds its schema, the
checked validator that names the offending field, the validator generated from the schema as
straight-line code, ``empty_payload`` (the schema with every value empty) and the schema's text for
the docs (``payload_shape_text``). Standard library only.

Regenerate the payload block of docs/design.md after changing the schema::

    python -m probe_wire.schema --write-docs
"""

from __future__ import annotations

import math
import os
import sys
import time

__all__ = [
    "DEVICE_MIXED",
    "DEVICE_NO_PARAMETERS",
    "MAX_DEVICES",
    "MAX_ERRORS",
    "MAX_EVENTS",
    "MAX_MODELS",
    "MAX_STR_CHARS",
    "MODEL_COLLECTED",
    "PREFIX_KEYS",
    "PUBLISH_FAILED",
    "ROLES",
    "SCHEMA",
    "STATES",
    "docs_with_payload_shape",
    "empty_payload",
    "empty_runtime",
    "payload_shape_text",
    "validate_payload",
    "validate_rest",
]

TYPE_CHECKING = False  # typing costs ~2 ms to import; annotations alone do not need it
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    Validator = Callable[[Any], "dict[str, Any] | None"]  # a payload -> its clean copy, None if refused

SCHEMA = 1
ROLES = ("main", "dataloader-worker", "rank", "child")
# What a reader makes of a segment (probe_wire.reader.SegmentRead.state).
# foreign-owner: this reader may not read the file (another uid's, and we are not root);
# owner-mismatch: the file's owner is not the uid the process runs as, so that process did not write it.
STATES = ("ok", "missing", "initialising", "busy", "corrupt", "stale", "foreign-owner", "owner-mismatch")
# ``where`` of the one error a fallback payload carries when the probe's payload could not be
# published: the sidecar reports it (probe-error) instead of the facts it no longer has.
PUBLISH_FAILED = "publish-failed"
# ``where`` of the error recorded when a registered model was garbage-collected (its message: the
# model's name): the sidecar says so instead of "no model is registered yet".
MODEL_COLLECTED = "model-collected"
# A model's ``device`` when it is not one device: a model without parameters, or one whose
# parameters are on several devices (``devices`` lists them).
DEVICE_NO_PARAMETERS = "no-parameters"
DEVICE_MIXED = "mixed"

# ----------------------------------------------------------------------------------------------
# Payload schema. Validation is strict (bool is not an int, int is not a float) because the payload
# is untrusted: a wrong type is rejected with the path of the offending field.


class _Opt:
    __slots__ = ("kind",)

    def __init__(self, kind: Any) -> None:
        self.kind = kind


class _Added:
    """A field added within schema 1: a payload of an older probe lacks it, and reads as None."""

    __slots__ = ("kind",)

    def __init__(self, kind: Any) -> None:
        self.kind = kind


class _List:
    __slots__ = ("item", "max_items")

    def __init__(self, item: Any, max_items: int) -> None:
        self.item = item
        self.max_items = max_items


class _Enum:
    __slots__ = ("values",)

    def __init__(self, values: tuple[str, ...]) -> None:
        self.values = values


class _Exact:
    """An int that must be this one value (the schema number): part of the schema, so the checker
    and the generated validator both enforce it instead of each caller remembering to."""

    __slots__ = ("value", "what")

    def __init__(self, value: int, what: str) -> None:
        self.value = value
        self.what = what


MAX_STR_CHARS = 4096
MAX_EVENTS = 64
MAX_ERRORS = 16
MAX_MODELS = 1024
MAX_DEVICES = 256

_RUNTIME = {
    "torch": _Opt(str),
    "cuda_build": _Opt(str),
    "cudnn": _Opt(int),
    "cuda_available": _Opt(bool),
    "cuda_initialized": bool,
    "device_count": _Opt(int),
    "devices": _List({"index": int, "name": str, "uuid": _Opt(str)}, MAX_DEVICES),
    "cuda_visible_devices": _Opt(str),
    "cuda_device_order": _Opt(str),
    "mps_available": _Opt(bool),
    "xpu_available": _Opt(bool),
    # Added within schema 1: libcuda.so.1 loads in the process (None: not asked, see probe/facts.py).
    "cuda_driver_loadable": _Added(bool),
    # Added within schema 1 (issue 41): a ROCm build's torch.version.hip, and the ROCm device masks.
    "hip_build": _Added(str),
    "hip_visible_devices": _Added(str),
    "rocr_visible_devices": _Added(str),
}
_MEMORY = {
    "device": str,
    "allocated_bytes": int,
    "reserved_bytes": int,
    "peak_allocated_bytes": int,
    "peak_reserved_bytes": int,
}
# Where a training step's wall time went over the probe's last window (probe._steps): fractions 0-1.
_STEPS = {
    "window_s": float,
    "steps": int,
    "step_s": _Opt(float),
    "data_wait_fraction": _Opt(float),
    "forward_fraction": _Opt(float),
    "optimizer_fraction": _Opt(float),
    "other_fraction": _Opt(float),
    # Of other_fraction: between optimizer steps less forward and data wait (backward, collectives).
    "backward_fraction": _Added(float),
}
# The process's math settings that decide whether tensor cores can work (None: torch not imported).
_MATH = {
    "allow_tf32_matmul": _Opt(bool),
    "cudnn_allow_tf32": _Opt(bool),
    "float32_matmul_precision": _Opt(str),
    "cudnn_benchmark": _Opt(bool),
}
# The DataLoader a model is fed from, as it was built.
_LOADER_SETTINGS = {
    "num_workers": _Opt(int),
    "pin_memory": _Opt(bool),
    "persistent_workers": _Opt(bool),
    "batch_size": _Opt(int),
    "prefetch_factor": _Added(int),  # added within schema 1
}
_MODEL = {
    "name": str,
    "class": str,
    "params": int,
    "device": str,
    "devices": _List(str, MAX_DEVICES),
    "input_device": _Opt(str),
    "forward_calls": int,
    "forward_rate_hz": float,
    "last_forward_time": _Opt(float),
    "data_wait_fraction": _Opt(float),
    "data_wait_s": _Opt(float),
    "step_s": _Opt(float),
    # Added within schema 1 (framework callbacks, probe._steps): absent in older probes' payloads.
    "train_steps": _Added(int),
    "step_rate_hz": _Added(float),
    "step_source": _Added(str),
    "shared_memory": _Added(bool),
    # Added within schema 1 (efficiency): what decides whether tensor cores can work, and the input.
    "param_dtypes": _Added(_List(str, 16)),
    "autocast": _Added(str),  # "off", or the dtype autocast ran the last forward in ("bfloat16")
    "input_shape": _Added(_List(int, 8)),
    "loader_settings": _Added(_LOADER_SETTINGS),
    # Calls ran inside torch.compile where they could not be counted (a module inlined into a
    # compiled parent): forward_calls and forward_rate_hz miss them.
    "compiled_uncounted": _Added(bool),
    # Added within schema 1: the batches data_wait_fraction, data_wait_s and step_s cover (their window).
    "data_wait_batches": _Added(int),
}
_PAYLOAD = {
    "schema": _Exact(SCHEMA, "schema"),
    "pid": int,
    "ppid": _Opt(int),
    "start_ticks": _Opt(int),
    "argv0": _Opt(str),
    "script": _Opt(str),
    "hostname": _Opt(str),
    "role": _Enum(ROLES),
    "worker_id": _Opt(int),
    "rank": _Opt(int),
    "local_rank": _Opt(int),
    "world_size": _Opt(int),
    "dist_backend": _Opt(str),
    # Added within schema 1: the job's distributed identity (probe/_distributed.py). The source is a
    # str, not an enum: a newer probe's new source must not make the whole payload invalid.
    "job_key": _Added(str),  # the key every process of the job agrees on, across nodes
    "job_key_source": _Added(str),  # "torchelastic" | "slurm" | "pod" | "launch"
    "node_rank": _Added(int),  # GROUP_RANK (torchrun), NODE_RANK, SLURM_NODEID
    "restart_count": _Added(int),  # TORCHELASTIC_RESTART_COUNT, SLURM_RESTART_COUNT
    "loader": _Added(str),  # a DataLoader worker: the label of the loader it serves ("train", "validation")
    "runtime": _RUNTIME,
    "memory": _List(_MEMORY, MAX_DEVICES),
    "models": _List(_MODEL, MAX_MODELS),
    "events": _List({"time": float, "name": str}, MAX_EVENTS),
    "errors": _List({"time": float, "where": str, "message": str}, MAX_ERRORS),
    "published_at": float,
    "trimmed": bool,
    # Added within schema 1 (efficiency): the step breakdown, math settings, host-device syncs.
    "steps": _Added(_STEPS),
    "math": _Added(_MATH),
    "syncs_per_step": _Added(float),  # counted only with register(model, syncs=True)
}


class _Invalid(ValueError):
    pass


def _type_name(value: Any) -> str:
    return "nil" if value is None else type(value).__name__


def _path(at: Any) -> str:
    """The dotted path of a field, built only when it is reported: ``at`` is a chain of
    (parent, suffix) pairs, cheaper to extend on every field than a formatted string."""
    parts = []
    while isinstance(at, tuple):
        at, step = at
        parts.append(f"[{step}]" if type(step) is int else f".{step}")
    parts.append(at)
    return "".join(reversed(parts))


def _check(value: Any, kind: Any, at: Any) -> Any:
    """Return a clean copy of ``value`` checked against ``kind``; raise _Invalid with the path."""
    if isinstance(kind, _Opt | _Added):
        return None if value is None else _check(value, kind.kind, at)
    if isinstance(kind, _List):
        return _check_list(value, kind, at)
    if isinstance(kind, dict):
        return _check_map(value, kind, at)
    if isinstance(kind, _Enum | _Exact):
        return _check_choice(value, kind, at)
    return _check_scalar(value, kind, at)


def _check_scalar(value: Any, kind: Any, at: Any) -> Any:
    if kind is int:
        if type(value) is not int:
            raise _Invalid(f"{_path(at)}: expected int, got {_type_name(value)}")
        return value
    if kind is str:
        if type(value) is not str:
            raise _Invalid(f"{_path(at)}: expected str, got {_type_name(value)}")
        if len(value) > MAX_STR_CHARS:
            raise _Invalid(f"{_path(at)}: string longer than {MAX_STR_CHARS}")
        return value
    if kind is float:
        if type(value) is not float:
            raise _Invalid(f"{_path(at)}: expected float, got {_type_name(value)}")
        if not math.isfinite(value):
            raise _Invalid(f"{_path(at)}: not a finite number")
        return value
    if kind is bool:
        if type(value) is not bool:
            raise _Invalid(f"{_path(at)}: expected bool, got {_type_name(value)}")
        return value
    raise AssertionError(f"bad schema kind at {_path(at)}")  # a bug in this module, not bad input


def _check_choice(value: Any, kind: _Enum | _Exact, at: Any) -> Any:
    if isinstance(kind, _Enum):
        if type(value) is not str or value not in kind.values:
            raise _Invalid(f"{_path(at)}: expected one of {'|'.join(kind.values)}, got {value!r:.40}")
        return value
    if type(value) is not int or value != kind.value:
        raise _Invalid(f"{_path(at)}: unsupported {kind.what} {value!r:.20} (this reader knows {kind.value})")
    return value


def _check_list(value: Any, kind: _List, at: Any) -> list[Any]:
    if type(value) is not list:
        raise _Invalid(f"{_path(at)}: expected array, got {_type_name(value)}")
    if len(value) > kind.max_items:
        raise _Invalid(f"{_path(at)}: more than {kind.max_items} items")
    item = kind.item
    return [_check(v, item, (at, i)) for i, v in enumerate(value)]


def _check_map(value: Any, kind: dict[str, Any], at: Any) -> dict[str, Any]:
    if type(value) is not dict:
        raise _Invalid(f"{_path(at)}: expected map, got {_type_name(value)}")
    out: dict[str, Any] = {}
    for key, sub in kind.items():
        if key not in value:
            if isinstance(sub, _Added):
                out[key] = None
                continue
            raise _Invalid(f"{_path(at)}.{key}: missing")
        out[key] = _check(value[key], sub, (at, key))
    # Unknown keys are dropped, not rejected: a newer probe may add fields within schema 1.
    return out


class _Gen:
    """Writes the schema out as straight-line Python: the same checks as ``_check`` without its
    recursion and dispatch, about four times faster. It only says yes (the clean copy) or no
    (None); on no, ``_check`` runs to name the offending field, so both must accept exactly the
    same payloads (tests/unit/test_probe_segment.py compares them on generated and hostile input)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {"_MAXS": MAX_STR_CHARS}
        self.n = 0

    def var(self) -> str:
        self.n += 1
        return f"v{self.n}"

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    @staticmethod
    def wrong(src: str, kind: type) -> str:
        """The condition under which ``src`` is not a valid value of the plain type ``kind``."""
        if kind is str:
            return f"type({src}) is not str or len({src}) > _MAXS"
        if kind is float:
            # x - x is 0.0 for every finite float and NaN for an infinity or a NaN: math.isfinite's
            # answer without a call.
            return f"type({src}) is not float or {src} - {src} != 0.0"
        return f"type({src}) is not {kind.__name__}"

    def check(self, src: str, kind: Any, depth: int) -> str:
        """Emit the checks of ``src`` (a variable) against ``kind``; return the clean value's expression."""
        fail = "return None"
        if isinstance(kind, _Added):
            kind = _Opt(kind.kind)  # presence was settled by the enclosing map
        if isinstance(kind, _Opt):
            inner = kind.kind
            if inner in (int, str, float, bool):
                self.emit(depth, f"if {src} is not None and ({self.wrong(src, inner)}): {fail}")
                return src
            out = self.var()
            self.emit(depth, f"{out} = None")
            self.emit(depth, f"if {src} is not None:")
            val = self.check(src, inner, depth + 1)
            self.emit(depth + 1, f"{out} = {val}")
            return out
        if kind in (int, str, float, bool):
            self.emit(depth, f"if {self.wrong(src, kind)}: {fail}")
            return src
        if isinstance(kind, _Enum):
            name = f"E{self.var()}"
            self.consts[name] = frozenset(kind.values)
            self.emit(depth, f"if type({src}) is not str or {src} not in {name}: {fail}")
            return src
        if isinstance(kind, _Exact):
            self.emit(depth, f"if type({src}) is not int or {src} != {int(kind.value)}: {fail}")
            return src
        if isinstance(kind, _List):
            out, item = self.var(), self.var()
            self.emit(depth, f"if type({src}) is not list or len({src}) > {kind.max_items}: {fail}")
            if kind.item in (int, str, float, bool):
                # Plain items: checked in place, copied in one C call.
                self.emit(depth, f"for {item} in {src}:")
                self.check(item, kind.item, depth + 1)
                self.emit(depth, f"{out} = list({src})")
                return out
            self.emit(depth, f"{out} = []")
            self.emit(depth, f"for {item} in {src}:")
            val = self.check(item, kind.item, depth + 1)
            self.emit(depth + 1, f"{out}.append({val})")
            return out
        if isinstance(kind, dict):
            self.emit(depth, f"if type({src}) is not dict: {fail}")
            fields = []
            for key, sub in kind.items():
                v = self.var()
                if isinstance(sub, _Added):
                    self.emit(depth, f"{v} = {src}.get({key!r})")
                else:
                    # A missing key raises KeyError, which the function answers with None (see
                    # _compile_validator): nothing else in it can raise that.
                    self.emit(depth, f"{v} = {src}[{key!r}]")
                fields.append(f"{key!r}: {self.check(v, sub, depth)}")
            out = self.var()
            self.emit(depth, f"{out} = {{{', '.join(fields)}}}")
            return out
        raise AssertionError(f"bad schema kind {kind!r}")


def _compile_validator(schema: dict[str, Any]) -> Validator:
    gen = _Gen()
    gen.emit(0, "def fast(p):")
    gen.emit(1, "try:")
    result = gen.check("p", schema, 2)
    gen.emit(2, f"return {result}")
    gen.emit(1, "except KeyError:")  # a required key missing (subscripts of exact dicts)
    gen.emit(2, "return None")
    namespace = dict(gen.consts)
    exec(compile("\n".join(gen.lines), "<probe_wire.schema schema 1>", "exec"), namespace)  # noqa: S102 -- generated from the constant schema above, never from input
    fast: Validator = namespace["fast"]
    return fast


_fast_validate = _compile_validator(_PAYLOAD)


def validate_payload(payload: Any) -> tuple[dict[str, Any] | None, str | None]:
    """Check an unpacked payload against schema 1: (clean copy, None) or (None, reason)."""
    try:
        clean = _fast_validate(payload)
        if clean is not None:
            return clean, None
        # Rejected (or an odd case): the slow checker says why, with the field's path.
        return _slow_validate(payload)
    except RecursionError:
        return None, "payload: nested too deeply"


# The keys a probe sets once (its identity, role and runtime) and writes first, in the schema's
# order (empty_payload's, which the probe fills in place): consecutive payloads of one process begin
# with the same bytes, which a follower decodes and validates once (probe_wire/prefix.py).
PREFIX_KEYS = frozenset(list(_PAYLOAD)[: list(_PAYLOAD).index("runtime") + 1])
_rest_validator: list[Validator] = []  # compiled when first asked for: the probe itself never needs it


def validate_rest(rest: Any) -> dict[str, Any] | None:
    """The clean copy of a payload's keys other than PREFIX_KEYS (the same checks as
    validate_payload makes of them), or None when they do not pass: the whole payload's
    validate_payload then says why."""
    if not _rest_validator:
        _rest_validator.append(_compile_validator({k: v for k, v in _PAYLOAD.items() if k not in PREFIX_KEYS}))
    try:
        return _rest_validator[0](rest)
    except RecursionError:
        return None


def _slow_validate(payload: Any) -> tuple[dict[str, Any] | None, str | None]:
    try:
        return _check(payload, _PAYLOAD, "payload"), None
    except _Invalid as e:
        return None, str(e)
    except RecursionError:
        return None, "payload: nested too deeply"


# ----------------------------------------------------------------------------------------------
# Derived from the schema: the empty payload, and its shape as the docs show it.


def _empty(kind: Any) -> Any:
    """The empty value of ``kind``: None when optional, [] for a list, a map of empty values, the
    enum's first value, the exact value, else the type's zero (False for a bool)."""
    if isinstance(kind, dict):
        return {key: _empty(sub) for key, sub in kind.items()}
    if isinstance(kind, _Opt | _Added):
        return None
    if isinstance(kind, _List):
        return []
    if isinstance(kind, _Enum):
        return kind.values[0]
    if isinstance(kind, _Exact):
        return kind.value
    return kind()


def _empty_factory(kind: Any, what: str) -> Callable[[], Any]:
    """A function that returns a fresh ``_empty(kind)`` each call: its value written out as a literal
    and compiled once, which costs a call what a hand-written dict does (a fifth of walking the schema
    on every publish)."""
    code = compile(f"lambda: {_empty(kind)!r}", f"<probe_wire.schema empty {what}>", "eval")
    factory: Callable[[], Any] = eval(code, {})  # noqa: S307 -- generated from the constant schema above, never from input
    return factory


_empty_payload: Callable[[], dict[str, Any]] = _empty_factory(_PAYLOAD, "payload")
empty_runtime: Callable[[], dict[str, Any]] = _empty_factory(_RUNTIME, "runtime")
empty_runtime.__doc__ = "The payload's ``runtime`` map with every value empty (a fresh dict each call)."


def empty_payload(pid: int | None = None, start_ticks: int | None = None) -> dict[str, Any]:
    """A schema-1 payload with every key present and every value empty: the base the probe fills."""
    payload = _empty_payload()
    payload["pid"] = os.getpid() if pid is None else int(pid)
    payload["start_ticks"] = start_ticks
    payload["published_at"] = time.time()
    return payload


_SHAPE_WIDTH = 100  # a map or list of maps wider than this is written one key a line
_NOTE_COLUMN = 66  # where the notes (# ...) start, when the line leaves room


def _shape(kind: Any) -> str:
    """``kind`` on one line: int, str|None, "a" | "b", [item], {"key": kind, ...}."""
    if isinstance(kind, _Opt | _Added):
        return f"{_shape(kind.kind)}|None"
    if isinstance(kind, _Enum):
        return " | ".join(f'"{v}"' for v in kind.values)
    if isinstance(kind, _Exact):
        return str(kind.value)
    if isinstance(kind, _List):
        return f"[{_shape(kind.item)}]"
    if isinstance(kind, dict):
        return "{" + ", ".join(f'"{key}": {_shape(sub)}' for key, sub in kind.items()) + "}"
    name: str = kind.__name__  # a type: int, float, str, bool
    return name


def _noted(line: str, kind: Any) -> str:
    notes = []
    if isinstance(kind, _Added):
        notes.append("added within schema 1")
        kind = kind.kind
    if isinstance(kind, _List):
        notes.append(f"at most {kind.max_items}")
    if not notes:
        return line
    return f"{line:<{_NOTE_COLUMN - 2}}  # {'; '.join(notes)}"


def _shape_lines(key: str | None, kind: Any, depth: int, last: bool, out: list[str]) -> None:
    """Append ``kind`` (under ``key``) to ``out``: one line when it fits, else one line a key."""
    pad = "  " * depth
    start = pad if key is None else f'{pad}"{key}": '
    comma = "" if last else ","
    inner = kind.item if isinstance(kind, _List) else kind
    one = f"{start}{_shape(kind)}{comma}"
    if len(one) <= _SHAPE_WIDTH or not isinstance(inner, dict):
        out.append(_noted(one, kind))
        return
    brackets = ("[{", "}]") if isinstance(kind, _List) else ("{", "}")
    out.append(start + brackets[0])
    keys = list(inner)
    for sub_key in keys:
        _shape_lines(sub_key, inner[sub_key], depth + 1, sub_key == keys[-1], out)
    out.append(_noted(f"{pad}{brackets[1]}{comma}", kind))


def payload_shape_text() -> str:
    """The payload's shape, as the block under "Probe payload" in docs/design.md shows it."""
    out = [
        f"# str: at most {MAX_STR_CHARS} characters; a list: at most the number noted.",
        "# added within schema 1: absent from an older probe's payload, read as None.",
    ]
    _shape_lines(None, _PAYLOAD, 0, True, out)
    return "\n".join(out) + "\n"


DOCS_HEADING = f"## Probe payload (msgpack map, schema {SCHEMA})"


def docs_with_payload_shape(text: str) -> str:
    """``text`` (docs/design.md) with the first code block under DOCS_HEADING replaced by
    ``payload_shape_text()``; ValueError when it has no such block."""
    at = text.find(f"\n{DOCS_HEADING}\n")
    start = text.find("\n```\n", at) if at >= 0 else -1
    end = text.find("\n```\n", start + 1) if start >= 0 else -1
    if end < 0:
        raise ValueError(f"no code block under {DOCS_HEADING!r}")
    return text[: start + 5] + payload_shape_text() + text[end + 1 :]


def main(argv: list[str]) -> int:
    """``--write-docs [PATH]``: regenerate the payload block of docs/design.md (or PATH);
    ``--check-docs [PATH]``: exit 1 when it is not current; no argument: print the block."""
    if not argv:
        sys.stdout.write(payload_shape_text())
        return 0
    if argv[0] not in ("--write-docs", "--check-docs") or len(argv) > 2:
        sys.stderr.write("usage: python -m probe_wire.schema [--write-docs | --check-docs] [PATH]\n")
        return 2
    path = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "docs", "design.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    new = docs_with_payload_shape(text)
    if new == text:
        return 0
    if argv[0] == "--check-docs":
        sys.stderr.write(f"{path}: not current; run: python -m probe_wire.schema --write-docs\n")
        return 1
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

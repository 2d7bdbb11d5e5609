"""sidecar/documents/contract.py: the one definition of the documents (schema 2), what is generated from it,
and that documents the sidecar builds keep to it (and documents that do not, fail)."""

from __future__ import annotations

import copy
import json
import os
import re
from types import SimpleNamespace

import jsonschema
import pytest

from probe_wire.records import DeviceRecord, RuntimeRecord
from sidecar.documents import contract, contract_docs
from sidecar.documents.contract import ContractError, check
from sidecar.documents.document import history_document, status_document
from sidecar.poll.collect import TargetInfo
from sidecar.poll.history import History
from sidecar.poll.samples import history_sample
from sidecar.serve.server import API, ServerConfig, create_app
from sidecar.verdict import (
    Facts,
    GpuFacts,
    ModelFacts,
    ProcessFacts,
    ProcGpu,
    RecentSample,
    Rules,
    SystemGpuFacts,
    decide,
)
from tests.helpers.static_source import StaticSource


def test_the_generated_files_are_current():
    for path, make in contract_docs.GENERATED_FILES.items():
        with open(path, encoding="utf-8") as f:
            assert f.read() == make(), f"{path} is stale: run `python -m sidecar.documents.contract --write`"


def test_the_json_schema_is_a_valid_2020_12_schema_and_closed():
    schema = contract.json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    for name, o in schema["$defs"].items():
        assert o["additionalProperties"] is False and set(o["required"]) == set(o["properties"]), name


def _fields():
    for o in contract.object_types().values():
        for name, f in o.fields.items():
            yield o.name, name, f


def test_names_carry_their_units():
    for obj, name, f in _fields():
        where = f"{obj}.{name}"
        assert not name.endswith("_mb"), f"{where}: MiB fields end in _mib"
        if "util" in name or "percent" in name:
            assert name.endswith("_pct"), f"{where}: percentages end in _pct"
        if re.search(r"(^|_)time(_|$)", name):
            assert name.endswith(("_unix_s", "_s")), f"{where}: times end in _unix_s (instants) or _s"
        if name.endswith(("_mib", "_pct", "_s", "_hz", "_fraction")):
            assert f.type in (contract.NUM, contract.INT), f"{where}: a unit on a non-number"
        assert f.doc.strip(), f"{where}: every field says what it means"


def _facts() -> Facts:
    """A job with something in every part of the document: a GPU model, a worker, an unprobed
    child on the GPU, a second GPU, an iGPU, warnings, events, memory growth in the history."""
    runtime = RuntimeRecord(
        torch="2.13.0",
        cuda_build="12.4",
        cudnn=90100,
        cuda_available=True,
        device_count=2,
        devices=(DeviceRecord(0, "A100", "GPU-0"),),
        cuda_visible_devices=None,
    )
    recent = tuple(RecentSample(1000.0 + 10 * i, 5.0, 1000.0 + 100 * i, 10 * i, 80.0, None) for i in range(10))
    main = ProcessFacts(
        pid=10,
        is_target=True,
        probe_state="ok",
        role="main",
        runtime=runtime,
        cuda_memory_mib=1000.5,
        models=(ModelFacts("net", "cuda:0", ("cuda:0",), 123, "cpu", 40, 2.5, 0.1),),
        gpu=(ProcGpu(0, 1200.0, 5.0),),
    )
    worker = ProcessFacts(pid=11, ppid=10, depth=1, probe_state="ok", role="dataloader-worker", worker_id=0, runtime=runtime)
    child = ProcessFacts(pid=12, ppid=10, depth=1, gpu=(ProcGpu(1, 300.0, None),))
    return Facts(
        target_pid=10,
        processes=(main, worker, child),
        nvml_ok=True,
        driver="550.54.15",
        cuda_driver="12.4",
        gpus=(
            GpuFacts(0, "GPU-0", "A100", "00000000:10:00.0", 80.0, 10.0, 11773.7568359375, 81920.0),
            GpuFacts(1, "GPU-1", "A100", "00000000:11:00.0", None, None, None, None, field_errors=(("utilization", "Not Supported"),)),
        ),
        system_gpus=(SystemGpuFacts("Intel", "UHD 770", "0000:00:02.0", "i915"),),
        recent=recent,
        rules=Rules(),
    )


def _status_document() -> dict:
    facts = _facts()
    info = {
        pid: SimpleNamespace(cmdline=("python", "train.py", "--token", "x"), cpu_percent=12.5, rss_mib=300.25)
        for pid in (10, 11, 12)
    }
    return status_document(
        facts,
        decide(facts),
        time_s=1090.0,
        interval_s=1.5,
        target=TargetInfo(10, "python", ["python", "train.py"], 990.0, 99000),
        proc_info=info,
        other_processes={0: 2},
        events=[{"time_unix_s": 1001.0, "name": "start", "pid": 10}],
    )


def test_a_built_status_document_keeps_to_the_contract():
    doc = _status_document()
    check(doc, "status")
    # The example exercises what it claims to: otherwise the check above proves little.
    assert doc["warnings"] and doc["memory_growth"] and doc["gpus"][1]["field_errors"]
    assert doc["gpus"][0]["mem_used_mib"] * 2**20 == 12_345_678_848
    assert json.loads(json.dumps(doc)) == doc  # plain JSON


@pytest.mark.parametrize(
    "change",
    [
        "extra top-level key",
        "extra process key",
        "missing key",
        "string where a number",
        "old schema",
        "unknown status",
        "null where not nullable",
        "old field name",
    ],
)
def test_a_document_that_breaks_the_contract_fails(change):
    doc = copy.deepcopy(_status_document())
    if change == "extra top-level key":
        doc["gpu_util"] = 87
    elif change == "extra process key":
        doc["processes"][0]["probe"] = True
    elif change == "missing key":
        del doc["memory_growth"]
    elif change == "string where a number":
        doc["gpus"][0]["mem_used_mib"] = "11773"
    elif change == "old schema":
        doc["schema"] = 1
    elif change == "unknown status":
        doc["status"] = "TPU"
    elif change == "null where not nullable":
        doc["processes"][0]["models"][0]["forward_calls"] = None
    elif change == "old field name":
        doc["gpus"][0]["util"] = doc["gpus"][0].pop("util_pct")
    with pytest.raises(ContractError):
        check(doc, "status")
    # The JSON Schema served to clients says the same of it.
    assert not jsonschema.Draft202012Validator(contract.json_schema("status")).is_valid(doc)


def test_the_checker_and_the_served_json_schema_agree_on_built_documents():
    doc = _status_document()
    for kind, d in (("status", doc), ("status", {**doc, "jobs": []})):
        check(d, kind)
        jsonschema.validate(d, contract.json_schema(kind))
    for bad in (True, 1.5, "x"):
        broken = copy.deepcopy(doc)
        broken["processes"][0]["pid"] = bad
        with pytest.raises(ContractError):
            check(broken, "status")
        assert not jsonschema.Draft202012Validator(contract.json_schema("status")).is_valid(broken)
    ok = copy.deepcopy(doc)
    ok["processes"][0]["pid"] = 10.0  # JSON has one number type: 10.0 is an integer to both
    check(ok, "status")
    jsonschema.validate(ok, contract.json_schema("status"))


def test_the_history_document_keeps_to_the_contract():
    facts = _facts()
    history = History(history_s=60, interval_s=1)
    for t in (1.0, 2.0, 3.0):
        history.append(history_sample(t, facts))
    history.add_events([{"time_unix_s": 2.5, "name": "epoch", "pid": 10}])
    doc = history_document(history, None, 1.0, "10-990")
    check(doc, "history")
    assert [s["time_unix_s"] for s in doc["samples"]] == [1.0, 2.0, 3.0] and doc["events"]
    doc["samples"][0]["gpus"][0]["mem_used_mb"] = 1.0
    with pytest.raises(ContractError):
        check(doc, "history")


def test_contract_checking_is_on_in_the_tests_and_catches_a_bad_document(monkeypatch):
    assert os.environ.get(contract.CHECK_ENV) == "1"
    with pytest.raises(ContractError):
        contract.check_if_enabled({"schema": 2}, "status")
    monkeypatch.delenv(contract.CHECK_ENV)
    assert contract.check_if_enabled({"schema": 2}, "status") == {"schema": 2}


def test_the_schema_route_serves_the_json_schema():
    client = create_app(ServerConfig(), StaticSource()).test_client()
    r = client.get(f"{API}/schema")
    assert r.status_code == 200 and r.json == contract.json_schema()
    jsonschema.validate(_status_document(), r.json)  # what a client would do with it


def test_the_page_and_the_plugin_read_the_generated_typedefs_and_schema():
    here = os.path.dirname(os.path.dirname(contract.__file__))
    fmt = open(os.path.join(here, "static", "shared", "format.js"), encoding="utf-8").read()
    assert re.search(r"import \{ SCHEMA \} from './contract\.js'", fmt)
    app = open(os.path.join(here, "static", "page", "app.js"), encoding="utf-8").read()
    assert "import('../shared/contract.js').StatusDocument" in app


def _design_fact_table() -> str:
    root = os.path.dirname(os.path.dirname(os.path.dirname(contract.__file__)))
    text = open(os.path.join(root, "docs", "design.md"), encoding="utf-8").read()
    start = text.index("## The path of a fact")
    return text[start : text.index("\n## ", start + 5)]


def test_the_path_of_a_fact_in_the_design_doc_names_what_the_code_has():
    root = os.path.dirname(os.path.dirname(os.path.dirname(contract.__file__)))
    code = ""
    for folder in ("hostfs", "probe", "probe_wire", "sidecar"):
        for dp, _, files in os.walk(os.path.join(root, folder)):
            for f in files:
                if f.endswith((".py", ".js")):
                    code += open(os.path.join(dp, f), encoding="utf-8").read()
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", code))
    table = _design_fact_table()
    status_fields = contract.STATUS_DOCUMENT.fields
    from probe_wire.schema import _PAYLOAD as probe_payload

    checked = 0
    for token in re.findall(r"`([^`\s]+)`", table):
        if token.startswith("/"):
            assert token in ("/metrics",), f"{token}: not a route the design names"
        elif "/" in token or token.endswith(".py"):
            assert os.path.exists(os.path.join(root, token.rstrip("/"))), f"{token}: no such path"
        elif "[]" in token and token.split("[]")[0] in probe_payload and token.split("[]")[0] not in status_fields:
            # a path in the probe's payload (probe_wire/schema.py)
            model_keys = probe_payload["models"].item
            assert token == "models[].device" and "device" in model_keys, token
        elif "[]" in token:  # a path in a document: every step is a declared field
            obj = contract.HISTORY_DOCUMENT if token.startswith("samples") else contract.STATUS_DOCUMENT
            for part in token.replace("[]", "").split("."):
                field = obj.fields.get(part)
                assert field is not None, f"{token}: {part} is not in {obj.name}"
                t = field.type.item if isinstance(field.type, contract.ListOf) else field.type
                obj = t if isinstance(t, contract.Obj) else obj
        elif re.fullmatch(r"[a-z_]+", token) and token in status_fields:
            pass  # a top-level field of the status document
        else:
            for part in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", token):
                assert part in words, f"docs/design.md names {token}, but the code has no {part}"
        checked += 1
    assert checked > 25


def test_a_jobs_list_made_from_a_status_document_keeps_to_the_contract():
    from sidecar.documents.document import job_entry, jobs_document, summary_of_document
    from sidecar.sources.lineage import RootInfo

    doc = _status_document()
    entry = job_entry(summary_of_document(doc), RootInfo(1000, "ada", "/home/ada/run", (9, 1)), None)
    jobs = jobs_document([entry], time_s=1090.0, interval_s=1.5, mode="pid", default_job=doc["job_id"])
    check(jobs, "jobs")
    assert entry["id"] == doc["job_id"] == "10-99000" and entry["gpus"] == [0, 1]
    assert entry["first_warning"] == doc["warnings"][0] and entry["has_model"] and entry["process_count"] == 3
    del jobs["jobs"][0]["cwd"]
    with pytest.raises(ContractError):
        check(jobs, "jobs")


def test_a_summary_reuses_the_last_rendering_only_while_the_verdict_is_equal():
    """status_summary's memo: an equal verdict (a fresh object, as each poll decides) shares the
    last poll's rendered texts; a changed message or warning is rendered anew, and either way the
    texts are those of a summary made without the memo."""
    from dataclasses import replace

    from sidecar.common.catalogue import Ref
    from sidecar.documents.document import status_summary

    facts, memo = _facts(), {}
    target = TargetInfo(10, "python", ["python", "train.py"], 990.0, 99000)
    first = status_summary(facts, decide(facts), target=target, memo=memo)
    again = status_summary(facts, decide(_facts()), target=target, memo=memo)
    assert again["warnings"] is first["warnings"] and again["message"] == first["message"]
    verdict = decide(facts)
    renamed = replace(verdict, warnings=(replace(verdict.warnings[0], message=Ref("warning.no-probe")),))
    changed = status_summary(facts, renamed, target=target, memo=memo)
    assert changed["warnings"] is not first["warnings"]
    assert changed == status_summary(facts, renamed, target=target)
    other = replace(renamed, message=Ref("message.mixed"))
    assert status_summary(facts, other, target=target, memo=memo) == status_summary(facts, other, target=target)
    assert status_summary(facts, other, target=target, memo=memo)["message_ref"]["id"] == "message.mixed"


def test_a_summary_reuses_the_target_s_clipped_texts_only_while_they_are_the_same_objects():
    from sidecar.documents.bounds import MAX_CMDLINE_ARGS
    from sidecar.documents.document import status_summary

    facts, memo = _facts(), {}
    long_cmdline = ["python", *(f"--arg{i}" for i in range(MAX_CMDLINE_ARGS + 5))]
    target = TargetInfo(10, "python", long_cmdline, 990.0, 99000)
    first = status_summary(facts, decide(facts), target=target, memo=memo)["target"]
    again = status_summary(facts, decide(facts), target=target, memo=memo)["target"]
    assert again["cmdline"] is first["cmdline"] and first == status_summary(facts, decide(facts), target=target)["target"]
    assert first["cmdline"][-1].endswith("more")  # clipped
    other = TargetInfo(10, "torchrun", ["torchrun", "x.py"], 990.0, 99000)
    changed = status_summary(facts, decide(facts), target=other, memo=memo)["target"]
    assert changed["name"] == "torchrun" and changed["cmdline"] == ["torchrun", "x.py"]

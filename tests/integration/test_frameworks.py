"""The probe under the frameworks people train with: real Lightning and Hugging Face trainers (CPU, tiny
models built from configs, no downloads), accelerate's loaders, DataLoader workers under every start
method, and hogwild children. Losses are compared step by step with and without the callbacks."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings

import pytest

torch = pytest.importorskip("torch")

import probe  # noqa: E402
from probe import _steps  # noqa: E402
from probe._breakdown import CLOCK, FRAMEWORK  # noqa: E402
from probe._state import PROBE  # noqa: E402
from probe_wire import read_segment, validate_payload  # noqa: E402
from tests.helpers import frameworks  # noqa: E402
from tests.helpers.harness import REPO, Sidecar, codes, python_env, wait_for  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def probe_on():
    if not PROBE.enabled:
        pytest.skip(f"the probe is off in this process: {PROBE.disabled_reason}")
    yield
    for rec in list(PROBE.records):
        model = rec.module_ref()
        if model is not None:
            probe.unregister(model)


def published() -> dict:
    """This process's payload as a reader (the sidecar) gets it from the segment."""
    probe.refresh()
    r = read_segment(os.getpid())
    assert r.state == "ok", r.error
    return r.payload


def entry(payload: dict, name: str) -> dict:
    found = [m for m in payload["models"] if m["name"] == name]
    assert len(found) == 1, [m["name"] for m in payload["models"]]
    return found[0]


def test_import_probe_imports_no_framework():
    code = (
        "import sys, probe; probe.activate(); "
        "print(sorted(m for m in ('torch', 'lightning', 'pytorch_lightning', 'transformers', 'accelerate', "
        "'probe.lightning', 'probe.transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=python_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


# -- Lightning -------------------------------------------------------------------------------------
def test_lightning_callback_changes_no_loss_and_publishes_steps_waits_and_events():
    pytest.importorskip("lightning")
    from probe.lightning import ProbeCallback

    plain, _ = frameworks.run_lightning([])
    t0 = time.time()
    watched, trainer = frameworks.run_lightning([ProbeCallback(name="fw-lit")])
    assert len(plain.losses) == len(watched.losses) == 64  # 256 samples / 8, two epochs
    assert watched.losses == plain.losses  # step by step, bit for bit
    p = published()
    lit = entry(p, "fw-lit")
    assert (lit["train_steps"], lit["step_source"]) == (64, "lightning")
    assert lit["forward_calls"] == 0  # training_step never calls the LightningModule's own forward...
    net = entry(p, "fw-lit.net")  # ...but self.net, which the callback found and registered
    assert net["class"] == "Sequential" and net["forward_calls"] >= 63 and net["input_device"] == "cpu"
    assert 0.0 < lit["data_wait_s"] < lit["step_s"] and 0.0 < lit["data_wait_fraction"] <= 1.0
    names = [e["name"] for e in p["events"] if e["time"] >= t0]
    assert names[:2] == ["lightning: fit start", "lightning: train epoch 0"]
    assert "lightning: train epoch 1" in names and names[-1] == "lightning: fit end after 64 steps"
    assert not [e for e in p["errors"] if e["where"].startswith("lightning") and e["time"] >= t0]
    # Validation workers started after the callback saw the loader say which loader they serve; the
    # sanity check's, started before any hook sees the loader, cannot.
    labels = [s.split("|")[0] for s in watched.val_labels]
    assert labels[-4:] == ["validation"] * 4 and set(labels[:2]) == {"None"}
    assert set(s.split("|")[0] for s in plain.val_labels) == {"None"}
    assert type(trainer.train_dataloader.worker_init_fn).__name__ == "LabelledWorkerInit"


def test_lightning_exception_is_an_event_and_reaches_the_user_unchanged():
    pytest.importorskip("lightning")
    import lightning.pytorch as L

    from probe.lightning import ProbeCallback

    class Boom(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(8, 2)

        def training_step(self, batch, batch_idx):
            if batch_idx == 3:
                raise ValueError("user bug at step 3")
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    loader = torch.utils.data.DataLoader(frameworks.xy_dataset(64), batch_size=8)
    trainer = L.Trainer(
        max_epochs=1, callbacks=[ProbeCallback(name="fw-boom")], logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
    )
    with pytest.raises(ValueError, match="user bug at step 3"):
        trainer.fit(Boom(), loader)
    names = [e["name"] for e in published()["events"]]
    assert "lightning: ValueError after 3 steps" in names


def test_callback_hooks_never_raise_into_the_trainer():
    pytest.importorskip("lightning")
    pytest.importorskip("transformers")
    from probe.lightning import ProbeCallback as LitCallback
    from probe.transformers import ProbeCallback as HfCallback

    t0 = time.time()  # the error ring is bounded: earlier tests may have filled it
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and nothing printed: a warning would fail the test
        _nonsense_calls(LitCallback(), HfCallback())
    wheres = {e["where"] for e in tuple(PROBE.errors) if e["time"] >= t0}
    assert "lightning.on_train_epoch_start" in wheres and "transformers.on_evaluate" in wheres


def _nonsense_calls(lit, hf) -> None:
    for hook in ("on_fit_start", "on_train_epoch_start", "on_train_start", "on_validation_start"):
        assert getattr(lit, hook)(object(), object()) is None  # nonsense arguments: recorded, not raised
    assert lit.on_train_batch_start(None, None, None, 0) is None
    assert hf.on_train_begin(None, None, None, model=object()) is None
    assert hf.on_step_end(None, None, None) is None and hf.on_evaluate(None, None, None) is None


FRACTIONS = ("data_wait_fraction", "forward_fraction", "optimizer_fraction", "other_fraction")


def breakdown_of_the_last_run(p: dict) -> dict:
    """The payload's step breakdown after a trainer's run: every part measured, fractions summing to 1."""
    s = p["steps"]
    assert s is not None and CLOCK.level == FRAMEWORK, s
    assert s["steps"] > 0 and s["step_s"] == pytest.approx(s["window_s"] / s["steps"])
    assert all(s[k] is not None and 0.0 <= s[k] <= 1.0 for k in FRACTIONS), s
    assert sum(s[k] for k in FRACTIONS) == pytest.approx(1.0, abs=0.02), s
    assert s["forward_fraction"] > 0.0 and s["optimizer_fraction"] > 0.0
    return s


def test_lightning_breakdown_waits_for_a_slow_loader_and_keeps_the_closure_out_of_the_optimizer():
    pytest.importorskip("lightning")
    from probe.lightning import ProbeCallback

    CLOCK.reset()  # this process trained before: the window starts with this fit
    frameworks.run_lightning(
        [ProbeCallback(name="fw-lit-slow")], epochs=1, max_steps=16, workers=0, item_sleep_s=0.01
    )
    p = published()
    s = breakdown_of_the_last_run(p)
    assert s["data_wait_fraction"] > 0.5, s
    assert entry(p, "fw-lit-slow")["loader_settings"] == {
        "num_workers": 0,
        "pin_memory": False,
        "persistent_workers": False,
        "batch_size": 8,
        "prefetch_factor": None,  # torch's own without workers
    }
    # training_step (inside the closure Lightning runs in optimizer.step) sleeps: that is not the
    # optimizer's time, which starts at on_before_optimizer_step.
    CLOCK.reset()
    frameworks.run_lightning([ProbeCallback(name="fw-lit-sleepy")], epochs=1, max_steps=12, workers=0, sleep_s=0.03)
    s = breakdown_of_the_last_run(published())
    assert s["optimizer_fraction"] < 0.2 and s["other_fraction"] > 0.5, s
    assert validate_payload(published())[1] is None


def _lightning_plain(*mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "tests.helpers.lightning_plain", *mode],
        env=python_env({"DSH_PROBE_INTERVAL_S": "0.05"}),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return __import__("json").loads(out.stdout.strip().splitlines()[-1])


def test_lightning_with_plain_register_times_the_closure_apart_and_shows_the_training_batch():
    """No callback: Lightning runs training_step and backward in a closure inside optimizer.step, and
    validates the same module on batches of another shape (limit_val_batches, a smaller batch)."""
    pytest.importorskip("lightning")
    from tests.helpers import lightning_plain as job

    got, plain = _lightning_plain("register"), _lightning_plain("plain")
    assert got["losses"] == plain["losses"] and len(got["losses"]) == job.STEPS  # step by step
    s = got["steps"]
    assert s["steps"] >= job.STEPS - 2, s
    # Each step sleeps STEP_SLEEP_S inside training_step: the closure's time, never the optimizer's.
    assert s["optimizer_fraction"] is not None and s["optimizer_fraction"] < 0.2, s
    assert s["other_fraction"] > 0.5, s
    m = got["model"]
    assert m["forward_calls"] > job.STEPS  # validation called it too...
    assert m["input_shape"] == [job.TRAIN_BATCH, 8]  # ...but the shape shown is the training batch's


def test_lightning_with_plain_register_counts_training_steps_when_training_step_skips_forward():
    """Issue 39 item 17: training_step calls self.net(x), so the registered module's forward runs in
    validation only. Its row and the training-rate chart read the forward rate (validation's, a few
    calls/s) while the breakdown counted every optimizer step. The model's steps are the optimizer's:
    what the user, and Lightning's global_step, call a training step."""
    pytest.importorskip("lightning")
    from tests.helpers import lightning_plain as job

    got = _lightning_plain("register", "net")
    assert len(got["losses"]) == job.STEPS
    m = got["model"]
    assert m["forward_calls"] <= 8 + 2, m  # validation's (sanity check and the epoch's), none in training
    assert (m["train_steps"], m["step_source"]) == (job.STEPS, "optimizer"), m
    assert m["step_rate_hz"] > 0.0, m
    assert got["steps"]["steps"] >= job.STEPS - 2, got["steps"]


# -- Hugging Face ------------------------------------------------------------------------------------
def test_transformers_callback_changes_no_loss_and_publishes_steps_waits_and_events():
    pytest.importorskip("transformers")
    from probe.transformers import ProbeCallback

    plain, _ = frameworks.run_transformers([])
    t0 = time.time()
    watched, model = frameworks.run_transformers([ProbeCallback(name="fw-bert")])
    assert len(plain) == len(watched) == 24 and watched == plain
    p = published()
    bert = entry(p, "fw-bert")
    assert bert["class"] == "BertForSequenceClassification"
    assert (bert["train_steps"], bert["step_source"]) == (24, "transformers")
    assert bert["forward_calls"] >= 24 and bert["input_device"] == "cpu"
    assert 0.0 < bert["data_wait_s"] < bert["step_s"]
    names = [e["name"] for e in p["events"] if e["time"] >= t0]
    assert names[0] == "transformers: train begin" and names[-1] == "transformers: train end at step 24"
    assert [n for n in names if "evaluate" in n] == [f"transformers: evaluate at step {s}" for s in (8, 16, 24)]
    assert not [e for e in p["errors"] if e["where"].startswith("transformers") and e["time"] >= t0]
    assert bert["loader_settings"]["batch_size"] == 8 and bert["loader_settings"]["num_workers"] == 0
    assert bert["param_dtypes"] == ["float32"] and bert["autocast"] == "off" and bert["input_shape"] == [8, 8]


def test_transformers_breakdown():
    pytest.importorskip("transformers")
    from probe.transformers import ProbeCallback

    CLOCK.reset()
    frameworks.run_transformers([ProbeCallback(name="fw-bert-breakdown")], steps=12, eval_steps=100)
    p = published()
    s = breakdown_of_the_last_run(p)
    assert s["steps"] == 11  # the boundaries of 12 steps: the first step's end starts the count
    assert validate_payload(p)[1] is None


def test_loader_accepts_accelerates_dataloadershard_and_yields_the_same():
    accelerate = pytest.importorskip("accelerate")
    acc = accelerate.Accelerator(cpu=True)
    data = torch.utils.data.TensorDataset(torch.arange(32.0).reshape(-1, 1))
    model, shard = acc.prepare(torch.nn.Linear(1, 1), torch.utils.data.DataLoader(data, batch_size=4))
    assert type(shard).__name__ == "DataLoaderShard"
    expected = [b[0].tolist() for b in shard]
    before = len(PROBE.errors)
    probe.register(model, name="fw-accelerate", loader=shard)
    got = []
    for (batch,) in shard:
        model(batch)
        got.append(batch.tolist())
    assert got == expected
    m = entry(published(), "fw-accelerate")
    assert m["data_wait_s"] is not None and m["step_s"] is not None
    assert not [e for e in list(PROBE.errors)[before:] if e["where"] == "loader"]


# -- DataLoader workers say which loader they serve --------------------------------------------------
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_workers_of_a_labelled_loader_say_so_under_every_start_method(method):
    import multiprocessing as mp

    loader = torch.utils.data.DataLoader(
        frameworks.LabelReport(8),
        batch_size=2,
        num_workers=2,
        multiprocessing_context=mp.get_context(method),
        worker_init_fn=frameworks.user_worker_init,
    )
    assert _steps.label_loader(loader, "validation")
    assert loader.worker_init_fn.user_fn is frameworks.user_worker_init
    seen = [s for _, _, labels in loader for s in labels]
    # Every item came from a worker that published "validation", after the user's own init ran.
    assert sorted(seen) == sorted(["validation|0"] * 4 + ["validation|1"] * 4), seen


# -- hogwild: a shared model trained by child processes ----------------------------------------------
def _hogwild(tmp_path, method: str, steps: int):
    out = tmp_path / f"pids-{method}"
    job = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.hogwild", method, str(steps), str(out)],
        env=python_env({"DSH_PROBE_INTERVAL_S": "0.2"}),
        cwd=REPO,
    )
    kids = wait_for(lambda: [int(x) for x in out.read_text().split()], 30, what="hogwild children")
    return job, kids


def test_hogwild_children_under_fork_count_their_own_calls(tmp_path):
    job, kids = _hogwild(tmp_path, "fork", 300)
    try:

        def counted():
            reads = [read_segment(k) for k in kids]
            return all(r.ok and r.payload["models"] and r.payload["models"][0]["forward_calls"] > 0 for r in reads) and reads

        reads = wait_for(counted, 20, what="both children to publish forward calls")
        for r in reads:
            (m,) = r.payload["models"]
            assert r.payload["role"] == "child" and m["name"] == "hogwild" and m["shared_memory"] is True
    finally:
        job.kill()
        job.wait()


def test_hogwild_children_under_spawn_are_named_on_the_panel(tmp_path, fake_nvml):
    job, kids = _hogwild(tmp_path, "spawn", 600)
    try:
        with Sidecar(["--pid", str(job.pid), "--port", "0", "--interval", "0.3"], env=fake_nvml.env()) as sc:
            doc = sc.wait_status(
                lambda d: "shared-model-unprobed-child" in codes(d), 30, what="the unprobed-children warning"
            )
            (w,) = [w for w in doc["warnings"] if w["code"] == "shared-model-unprobed-child"]
            assert set(kids) <= set(w["pids"]) and "probe.register(model)" in w["hint"]
            main = next(p for p in doc["processes"] if p["pid"] == job.pid)
            assert main["models"][0]["shared_memory"] is True
    finally:
        job.kill()
        job.wait()


# -- the sidecar sees the step rate ------------------------------------------------------------------
def test_sidecar_reports_the_step_rate_of_a_lightning_job(tmp_path, fake_nvml):
    pytest.importorskip("lightning")
    job = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.frameworks", "lightning", "--steps", "600", "--sleep-s", "0.02"],
        env=python_env({"DSH_PROBE_INTERVAL_S": "0.25"}),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with Sidecar(["--pid", str(job.pid), "--port", "0", "--interval", "0.3"], env=fake_nvml.env()) as sc:

            def stepping(doc):
                for p in doc["processes"]:
                    for m in p["models"]:
                        if m.get("step_source") == "lightning" and (m.get("step_rate_hz") or 0) > 1.0:
                            return m
                return None

            doc = sc.wait_status(stepping, 40, what="a non-zero step rate")
            m = stepping(doc)
            assert m["train_steps"] > 0 and m["forward_calls"] == 0
            # One step per ~20 ms of sleep at most: a readable rate, not a per-tick jump.
            assert 1.0 < m["step_rate_hz"] < 60.0
    finally:
        job.kill()
        job.wait()

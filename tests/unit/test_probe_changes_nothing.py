"""Issue 11 item 3: the probe line changes no result and prints nothing the user cannot act on.

The same seeded training runs twice, without and with ``probe.register`` (model and loader), for a
model of the program's own class (patched class), a torch ``Sequential`` (probed subclass) and the
pre-hook fallback; the losses must be bit-identical step by step and no warning may be raised.
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

import probe  # noqa: E402


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))

    def forward(self, x):
        return self.net(x)


def train(kind: str, with_probe: bool, syncs: bool = False) -> list[float]:
    torch.manual_seed(0)
    model = Mlp() if kind == "class" else torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    data = torch.utils.data.TensorDataset(torch.randn(96, 8), torch.randint(0, 3, (96,)))
    loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(1))
    if with_probe:
        model = probe.register(model, name=f"unchanged-{kind}", loader=loader, syncs=syncs)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    try:
        for _epoch in range(2):
            for x, y in loader:
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                losses.append(loss.item())
    finally:
        if with_probe:
            probe.unregister(model)
    return losses


@pytest.mark.parametrize("kind", ["class", "subclass", "pre-hook"])
def test_losses_are_identical_with_and_without_the_probe(kind, monkeypatch):
    if kind == "pre-hook":
        monkeypatch.setenv("DSH_PROBE_INSTRUMENT", "hook")
    plain = train(kind, False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning the probe printed would fail here
        watched = train(kind, True)
    assert len(plain) == 24 and watched == plain


def _settings_now() -> tuple:
    c = torch._C
    return (
        c._get_cublas_allow_tf32(),
        c._get_cudnn_allow_tf32(),
        c._get_float32_matmul_precision(),
        c._get_cudnn_benchmark(),
        torch.is_autocast_enabled("cpu"),
        torch.get_num_threads(),
    )


def test_breakdown_and_syncs_opt_in_change_no_loss_no_setting_and_no_warning_filter():
    """The step breakdown's optimizer hooks, the math settings it reads and ``syncs=True`` (waiting
    for CUDA here) leave the losses, torch's settings and the warning filters as they were."""
    plain = train("class", False)
    settings, filters = _settings_now(), list(warnings.filters)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        inner_filters = list(warnings.filters)
        watched = train("class", True, syncs=True)
        snap = probe.snapshot()
        assert warnings.filters == inner_filters
    assert watched == plain
    assert _settings_now() == settings and warnings.filters == filters
    assert snap["math"]["float32_matmul_precision"] == settings[2]

"""deploy/kubernetes/: every manifest valid against the Kubernetes 1.31 schemas (strict: no unknown
field), with kubernetes-validate; and the parts agree with each other and with the sidecar (labels,
ports, the token's Secret, the capabilities the docs explain)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is in the test extras")

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.31.0"
MANIFESTS = ("namespace.yaml", "daemonset.yaml", "service.yaml")


def load(name: str) -> dict:
    return yaml.safe_load((DEPLOY / name).read_text())


@pytest.mark.parametrize("name", MANIFESTS)
def test_each_manifest_is_valid_for_kubernetes(name):
    kubernetes_validate.validate(load(name), KUBERNETES_VERSION, strict=True)


def test_the_validation_can_fail():
    """A misspelt field of the DaemonSet is refused: the check above is not vacuous."""
    ds = load("daemonset.yaml")
    ds["spec"]["template"]["spec"]["hostPid"] = ds["spec"]["template"]["spec"].pop("hostPID")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, KUBERNETES_VERSION, strict=True)


def test_the_kustomization_lists_every_manifest():
    listed = load("kustomization.yaml")["resources"]
    assert sorted(listed) == sorted(p.name for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml")


def test_the_parts_agree():
    ds, svc, sm = load("daemonset.yaml"), load("service.yaml"), load("servicemonitor.yaml")
    pod = ds["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert svc["spec"]["selector"].items() <= labels.items()
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    port = container["ports"][0]
    assert container["command"][container["command"].index("--port") + 1] == str(port["containerPort"])
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(port["containerPort"])
    assert svc["spec"]["ports"][0]["targetPort"] == port["name"] == sm["spec"]["endpoints"][0]["port"]
    token = next(e for e in container["env"] if e["name"] == "DSH_SIDECAR_TOKEN")["valueFrom"]["secretKeyRef"]
    assert sm["spec"]["endpoints"][0]["authorization"]["credentials"] == token
    # What a node agent of this kind needs, and no more.
    spec, sec = pod["spec"], container["securityContext"]
    assert spec["hostPID"] is True and spec["automountServiceAccountToken"] is False
    assert sec["readOnlyRootFilesystem"] is True and sec["allowPrivilegeEscalation"] is False
    assert sec["capabilities"] == {"drop": ["ALL"], "add": ["SYS_PTRACE", "DAC_READ_SEARCH"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/dev/shm"]["readOnly"] and mounts["/var/lib/kubelet/pod-resources"]["readOnly"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility" and env["NVIDIA_VISIBLE_DEVICES"] == "all"


def test_the_servicemonitor_is_a_crd_no_core_schema_knows():
    """The ServiceMonitor is the Prometheus Operator's CRD: the Kubernetes schemas have none, so its
    shape is checked above (selector, port, token) rather than validated here."""
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(load("servicemonitor.yaml"), KUBERNETES_VERSION, strict=True)

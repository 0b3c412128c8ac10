"""The deployment files: the Kubernetes manifests validate offline against the Kubernetes
schemas (``kubernetes-validate`` ships them), agree with each other and with the server
(their serve arguments parse with the real parser; the termination grace covers the
drain), and every path the container build file copies exists."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

kubernetes_validate = pytest.importorskip("kubernetes_validate")

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.30.0"


def _docs() -> list[tuple[str, dict]]:
    out = []
    for path in sorted(K8S.glob("*.yaml")):
        out += [(path.name, d) for d in yaml.safe_load_all(path.read_text()) if d]
    return out


def _kind(kind: str) -> dict:
    (doc,) = [d for _, d in _docs() if d["kind"] == kind]
    return doc


@pytest.mark.parametrize("name, doc", [(n, d) for n, d in _docs() if d["kind"] != "Kustomization"],
                         ids=lambda x: x if isinstance(x, str) else x.get("kind", ""))
def test_manifest_validates_against_the_kubernetes_schema(name, doc):
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_every_manifest_is_in_the_kustomization():
    listed = set(_kind("Kustomization")["resources"])
    assert listed == {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}


def _container() -> dict:
    (c,) = _kind("Deployment")["spec"]["template"]["spec"]["containers"]
    return c


def _args() -> dict[str, str]:
    return dict(a.removeprefix("--").split("=", 1) for a in _container()["args"])


def test_the_serve_arguments_parse_with_the_real_parser():
    from sglang_mm_grpc.cli.commands import build_parser

    args = build_parser().parse_args(["serve", *_container()["args"]])
    assert args.processes == 2 and args.drain_delay_s == 5 and args.grace_s == 30


def test_probes_ask_the_grpc_health_service_on_the_served_port():
    c = _container()
    port = int(_args()["port"])
    assert {p["name"]: p["containerPort"] for p in c["ports"]}["grpc"] == port
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["grpc"]["port"] == port, probe


def test_termination_grace_covers_the_drain():
    spec = _kind("Deployment")["spec"]["template"]["spec"]
    a = _args()
    assert spec["terminationGracePeriodSeconds"] >= float(a["drain-delay"]) + float(a["grace"]) + 5
    # the readiness probe notices NOT_SERVING well within the delay
    probe = _container()["readinessProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] < float(a["drain-delay"])


def test_resources_match_the_processes():
    a = _args()
    cpu = float(_container()["resources"]["requests"]["cpu"])
    assert cpu == int(a["processes"]) * int(a["workers"])
    ports = {p["containerPort"] for p in _container()["ports"]}
    assert {int(a["metrics-port"]) + i for i in range(int(a["processes"]))} <= ports  # one per process


def test_services_pdb_and_hpa_point_at_the_deployment():
    dep = _kind("Deployment")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    services = [d for _, d in _docs() if d["kind"] == "Service"]
    assert sorted(s["spec"].get("clusterIP", "") for s in services) == ["", "None"]  # a ClusterIP one, a headless one
    for s in services:
        assert s["spec"]["selector"].items() <= labels.items()
        assert s["spec"]["ports"][0]["targetPort"] == "grpc"
    assert _kind("PodDisruptionBudget")["spec"]["selector"]["matchLabels"].items() <= labels.items()
    target = _kind("HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", dep["metadata"]["name"])
    assert _kind("HorizontalPodAutoscaler")["spec"]["minReplicas"] >= 2


def _build_file() -> Path:
    (path,) = [p for p in (ROOT / "Dockerfile", ROOT / "Containerfile") if p.exists()]
    return path


def test_every_path_the_build_file_copies_exists():
    copies = []
    for line in _build_file().read_text().splitlines():
        words = shlex.split(line.split("#", 1)[0]) if line.strip().upper().startswith("COPY") else []
        if not words:
            continue
        if any(w.startswith("--from") for w in words):
            continue  # from another build stage
        sources = [w for w in words[1:-1] if not w.startswith("--")]
        copies += sources
    assert copies, "no COPY found"
    for source in copies:
        assert (ROOT / source).exists(), f"{_build_file().name} copies {source}, which is not in the repository"


def test_the_image_runs_the_installed_command():
    text = _build_file().read_text()
    entry = re.search(r'^ENTRYPOINT \["([^"]+)"', text, re.M).group(1)
    assert f'{entry} = "sglang_mm_grpc.cli:main"' in (ROOT / "pyproject.toml").read_text()
    assert "docker build" in text and "deploy/kubernetes" in (ROOT / "docs" / "SERVICE.md").read_text()

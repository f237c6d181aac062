"""The Grafana dashboard and Prometheus alert rules of docker/ (issue 24, part 3).

* Every metric a rule or a panel reads is one the gateway exports (a live ``/metrics`` scrape of a test gateway):
  a renamed metric breaks this test, not a dashboard in production.
* ``promtool check rules`` and ``promtool test rules`` (each alert fires on a series made to trip it, and stays quiet
  on its healthy twin) where promtool is installed (Debian's ``prometheus`` package; ``.ci/run`` installs it);
  a schema check of the rules and of the dashboard JSON always.
* The compose file provisions what exists: the rules file, the datasource the dashboard names, the dashboard folder.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.conftest import make_client
from tests.factories import FakeEntity

DOCKER = Path(__file__).resolve().parents[2] / "docker"
RULES = DOCKER / "prometheus" / "alerts.yml"
RULE_TESTS = DOCKER / "prometheus" / "alerts.test.yml"
DASHBOARD = DOCKER / "grafana" / "dashboards" / "fedcd.json"
DATASOURCES = DOCKER / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
PROVIDERS = DOCKER / "grafana" / "provisioning" / "dashboards" / "fedcd.yml"
COMPOSE = DOCKER / "compose.production.yaml"
PROMETHEUS_BUILTINS = {"up"}

RULES_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["groups"], "additionalProperties": False,
    "properties": {"groups": {"type": "array", "minItems": 1, "items": {
        "type": "object", "required": ["name", "rules"], "additionalProperties": False,
        "properties": {"name": {"type": "string"}, "rules": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["alert", "expr", "for", "labels", "annotations"], "additionalProperties": False,
            "properties": {
                "alert": {"type": "string", "pattern": "^Fedcd[A-Z][A-Za-z0-9]+$"},
                "expr": {"type": "string", "minLength": 1},
                "for": {"type": "string", "pattern": "^[0-9]+[smh]$"},
                "labels": {"type": "object", "required": ["severity"],
                           "properties": {"severity": {"enum": ["page", "warn"]}}},
                "annotations": {"type": "object", "required": ["summary", "description"],
                                "properties": {"summary": {"type": "string", "minLength": 1},
                                               "description": {"type": "string", "minLength": 1}}},
            }}}}}}},
}

_GRID = {"type": "object", "required": ["h", "w", "x", "y"],
         "properties": {k: {"type": "integer", "minimum": 0} for k in ("h", "w", "x", "y")}}
DASHBOARD_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["uid", "title", "schemaVersion", "panels", "time", "refresh"],
    "properties": {
        "uid": {"type": "string", "pattern": "^[a-z0-9-]{1,40}$"}, "title": {"type": "string", "minLength": 1},
        "schemaVersion": {"type": "integer", "minimum": 30},
        "panels": {"type": "array", "minItems": 1, "items": {"oneOf": [
            {"type": "object", "required": ["type", "title", "gridPos", "id"],
             "properties": {"type": {"const": "row"}, "gridPos": _GRID, "id": {"type": "integer"}}},
            {"type": "object", "required": ["type", "title", "gridPos", "id", "datasource", "targets"],
             "properties": {
                 "type": {"enum": ["timeseries", "stat", "table", "gauge", "bargauge"]},
                 "gridPos": _GRID, "id": {"type": "integer"},
                 "datasource": {"type": "object", "required": ["type", "uid"],
                                "properties": {"type": {"const": "prometheus"}}},
                 "targets": {"type": "array", "minItems": 1, "items": {
                     "type": "object", "required": ["expr", "refId"],
                     "properties": {"expr": {"type": "string", "minLength": 1}, "refId": {"type": "string"}}}},
             }},
        ]}},
    },
}


def _rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def _metric_names(expr: str) -> set[str]:
    """The metric names an expression reads (fedcd's all start with fedcd_; Prometheus' own: ``up``)."""
    names = set(re.findall(r"\b(fedcd_[a-z0-9_]+)\b", expr))
    return names | {b for b in PROMETHEUS_BUILTINS if re.search(rf"\b{b}\{{", expr)}


def _exported(tmp_path: Path) -> set[str]:
    """Every sample name the gateway's /metrics can carry (histograms: their _bucket, _count and _sum)."""
    with make_client(tmp_path, {"alpha": FakeEntity("alpha", 0.4)}, metrics_token="scrape-token") as client:
        assert client.post("/v1/diagnose", json={"student_id": "s1", "qmatrix_id": "example-prealgebra",
                                          "responses": [{"item_id": "q01", "correct": True}]}).status_code == 200
        text = client.get("/metrics", headers={"Authorization": "Bearer scrape-token"}).text
    names: set[str] = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\w+)$", text, flags=re.M):
        names |= {f"{name}{suffix}" for suffix in ("_bucket", "_count", "_sum")} if kind == "histogram" else {name}
    return names


def test_every_metric_a_rule_or_a_panel_reads_is_one_the_gateway_exports(tmp_path: Path) -> None:
    exported = _exported(tmp_path) | PROMETHEUS_BUILTINS
    read = {name: f"alert {rule['alert']}" for rule in _rules() for name in _metric_names(rule["expr"])}
    read |= {name: f"panel {panel['title']!r}" for panel in _dashboard()["panels"]
             for target in panel.get("targets", []) for name in _metric_names(target["expr"])}
    assert len(read) >= 15  # the rules and panels cover the gateway's families, not a token few
    missing = {name: where for name, where in read.items() if name not in exported}
    assert not missing, f"metrics read but not exported by the gateway: {missing}"
    # ... and what an operator needs to watch is on the dashboard
    on_dashboard = {n for panel in _dashboard()["panels"] for t in panel.get("targets", []) for n in _metric_names(t["expr"])}
    for family in ("fedcd_entity_failures_total", "fedcd_entity_circuit_state", "fedcd_entity_cost_usd_total",
                   "fedcd_privacy_budget_refusals_total", "fedcd_jobs", "fedcd_http_request_duration_seconds_bucket"):
        assert family in on_dashboard, family


def test_the_alert_rules_and_the_dashboard_match_their_schemas() -> None:
    jsonschema.validate(yaml.safe_load(RULES.read_text()), RULES_SCHEMA)
    names = [rule["alert"] for rule in _rules()]
    assert len(names) == len(set(names))
    required = {"FedcdEntityFailureRate", "FedcdCircuitOpen", "FedcdBudgetRefusalSpike", "FedcdJobStuck",
                "FedcdServerErrors"}
    assert required <= set(names)
    dashboard = _dashboard()
    jsonschema.validate(dashboard, DASHBOARD_SCHEMA)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        refs = [t["refId"] for t in panel.get("targets", [])]
        assert len(refs) == len(set(refs)), panel["title"]
    # A broken rule is refused by the schema (the check can fail)
    broken = yaml.safe_load(RULES.read_text())
    del broken["groups"][0]["rules"][0]["labels"]["severity"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, RULES_SCHEMA)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian package prometheus)")
def test_promtool_checks_the_rules_and_runs_their_unit_tests() -> None:
    check = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in check.stdout
    tested = subprocess.run(["promtool", "test", "rules", RULE_TESTS.name], cwd=RULE_TESTS.parent,
                            capture_output=True, text=True, timeout=120)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # every alert has a unit test that makes it fire
    fired = {t["alertname"] for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
             for t in test.get("alert_rule_test", []) if t.get("exp_alerts")}
    assert fired == {rule["alert"] for rule in _rules()}


def test_the_compose_file_provisions_the_rules_the_datasource_and_the_dashboard() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    prometheus = yaml.safe_load((DOCKER / "prometheus" / "prometheus.yml").read_text())
    volumes = {v.split(":")[1]: v.split(":")[0] for s in compose["services"].values() for v in s.get("volumes", [])
               if v.startswith("./")}
    for mounted_at in prometheus["rule_files"]:
        assert (COMPOSE.parent / volumes[mounted_at]).resolve() == RULES
    datasource = yaml.safe_load(DATASOURCES.read_text())["datasources"][0]
    assert {p["datasource"]["uid"] for p in _dashboard()["panels"] if "datasource" in p} == {datasource["uid"]}
    folder = yaml.safe_load(PROVIDERS.read_text())["providers"][0]["options"]["path"]
    assert (COMPOSE.parent / volumes[folder]).resolve() == DASHBOARD.parent
    assert (COMPOSE.parent / volumes["/etc/grafana/provisioning"]).resolve() == DATASOURCES.parents[1]

"""`fedcd train`: options, the per-round table, a signed publish, and refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import cli
from federated import ModelRegistry
from federated.item_release import DEFAULT_RELEASE_SHARE

runner = CliRunner()


def test_train_in_process_publishes_a_signed_model(tmp_path: Path) -> None:
    out = tmp_path / "models"
    result = runner.invoke(cli, ["train", "--dataset", "synthetic", "--max-students", "200", "--clients", "2", "--rounds", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "held-out AUC" in result.output and "bytes sent" in result.output and "published v0001" in result.output
    assert ModelRegistry(out).load().signature_verified


def test_train_on_flower_with_secure_aggregation(tmp_path: Path) -> None:
    out = tmp_path / "models"
    result = runner.invoke(cli, ["train", "--engine", "flower", "--model", "higher-order-irt", "--secagg", "--dataset", "synthetic", "--max-students", "150",
                                 "--clients", "3", "--rounds", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    manifest = ModelRegistry(out).load().manifest
    assert manifest["config"]["training"]["engine"] == "flower" and manifest["config"]["training"]["secagg"] is True


def test_train_refuses_inconsistent_options(tmp_path: Path) -> None:
    cases = [
        (["--dp", "student"], "--epsilon is required"),
        (["--epsilon", "2"], "only applies"),
        (["--engine", "flower", "--secagg", "--aggregation", "median"], "choose one"),
        (["--secagg"], "--engine flower"),
        (["--aggregation", "magic"], "--aggregation"),
        (["--model", "magic"], "unknown model kind"),
    ]
    for extra, message in cases:
        result = runner.invoke(cli, ["train", "--dataset", "synthetic", "--out", str(tmp_path), *extra])
        assert result.exit_code == 2, (extra, result.output)
        assert message in result.output, (extra, result.output)


def test_models_list_verify_and_rollback(tmp_path: Path) -> None:
    out = tmp_path / "models"
    for seed in ("0", "1"):
        result = runner.invoke(cli, ["train", "--dataset", "synthetic", "--max-students", "150", "--clients", "2", "--rounds", "1",
                                     "--seed", seed, "--force", "--out", str(out)])
        assert result.exit_code == 0, result.output
    listing = runner.invoke(cli, ["models", "list", "--registry", str(out)])
    assert listing.exit_code == 0 and "v0001" in listing.output and "v0002" in listing.output and "verified" in listing.output
    assert runner.invoke(cli, ["models", "verify", "v0001", "--registry", str(out)]).exit_code == 0
    rolled = runner.invoke(cli, ["models", "rollback", "v0001", "--registry", str(out)])
    assert rolled.exit_code == 0 and "v0001" in rolled.output
    assert ModelRegistry(out).active_version() == "v0001"
    (out / "versions" / "v0002" / "model.pt").write_bytes(b"tampered")
    assert runner.invoke(cli, ["models", "verify", "v0002", "--registry", str(out)]).exit_code == 1
    assert runner.invoke(cli, ["models", "rollback", "v0002", "--registry", str(out)]).exit_code == 1


@pytest.mark.parametrize(("extra", "share"), [([], DEFAULT_RELEASE_SHARE), (["--item-release-share", "0.3"], 0.3)])
def test_train_under_dp_spends_the_default_release_share_unless_told(tmp_path: Path, monkeypatch, extra, share) -> None:
    # Prepare: stop at the trainer, keeping the configuration the CLI built
    import federated

    seen = []

    def stop(*, config, **_):
        seen.append(config)
        raise ValueError("stopped by the test")

    monkeypatch.setattr(federated, "train_federated", stop)

    # Execute
    result = runner.invoke(cli, ["train", "--dataset", "synthetic", "--max-students", "100", "--dp", "student",
                                 "--epsilon", "2", "--out", str(tmp_path), *extra])

    # Assert: the trainer got the share asked for, or the trainer's default (not a copy of it in the CLI)
    assert result.exit_code == 2 and "stopped by the test" in result.output
    assert seen[0].item_release_share == share

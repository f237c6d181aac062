"""The container image: `make image` builds it and `make image-test` runs the README's first diagnosis in it.

The build-and-run test needs a working podman or docker and takes minutes (docs/container.md measures it), so
it runs in CI (``CI`` set; .ci/run installs podman) or when ``FEDCD_TEST_IMAGE=1``. In CI a missing engine fails
the test, never skips it, unless the system has no podman package at all: a failed install (a mirror down, a
dpkg lock) must not let an image that no longer builds pass CI unnoticed, while a system where podman cannot
exist would otherwise fail every run for a reason no change to fedcd can fix.

The other tests read the scripts only and run everywhere.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
TAG = "localhost/fedcd:test"
BUILD_TIMEOUT_S = 3600  # a build with nothing cached compiles llama.cpp; only a hung build gets near this


def _smoke_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fedcd_image_smoke", ROOT / "docker" / "smoke.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _image_flags(**env: str) -> list[str]:
    """The build command `make image` would run, for the given settings (docker/image.sh flags; runs no engine)."""
    settings = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "IMAGE_SITE": "", **env}
    done = subprocess.run([str(ROOT / "docker" / "image.sh"), "flags"], capture_output=True, text=True,
                          env=settings, timeout=60, check=True)
    return shlex.split(done.stdout)


def test_a_users_docker_build_is_the_plain_one() -> None:
    # no site settings: nothing of the project's machines (runc, host network, host wheels) reaches a user's build
    assert _image_flags(CONTAINER_ENGINE="docker") == shlex.split(
        "docker build -f docker/Dockerfile -t fedcd:latest --build-arg BASE_IMAGE=python:3.11-slim .")


def test_a_mirror_and_a_ca_bundle_are_a_build_argument_and_a_build_secret() -> None:
    flags = _image_flags(CONTAINER_ENGINE="docker", IMAGE_PIP_INDEX_URL="https://pypi.example/simple",
                         IMAGE_CA_BUNDLE="/etc/ssl/company.pem")
    pairs = list(zip(flags, flags[1:]))
    assert ("--build-arg", "PIP_INDEX_URL=https://pypi.example/simple") in pairs
    assert ("--secret", "id=ca-bundle,src=/etc/ssl/company.pem") in pairs


def test_the_dockerfile_takes_secrets_only_as_build_secrets() -> None:
    text = (ROOT / "docker" / "Dockerfile").read_text()
    args = re.findall(r"^ARG (\w+)", text, flags=re.M)
    assert {"BASE_IMAGE", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS"} <= set(args)
    # an ARG's value is recorded in the image's history: nothing secret-shaped may travel that way
    assert [a for a in args if re.search(r"CERT|CA_BUNDLE|TOKEN|PASSWORD|SECRET|KEY", a)] == []
    assert "--mount=type=secret,id=ca-bundle" in text
    assert re.search(r"^USER (?!0\b|root\b)\S+", text, flags=re.M), "the image must run as a non-root user"


def test_the_smoke_check_sends_the_readmes_first_diagnosis(tmp_path: Path) -> None:
    smoke = _smoke_module()
    body = smoke.readme_first_diagnosis()
    assert body["qmatrix_id"] and body["responses"], "the README's first curl must diagnose something"
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n```bash\ncurl -s http://127.0.0.1:8000/healthz\n```\n")
    with pytest.raises(smoke.SmokeFailure, match="no code block"):
        smoke.readme_first_diagnosis(readme)


def _engine_or_reason() -> tuple[str | None, str]:
    for engine in ("podman", "docker"):
        if shutil.which(engine):
            info = subprocess.run([engine, "info"], capture_output=True, text=True, timeout=120)
            if info.returncode == 0:
                return engine, ""
    return None, "neither podman nor a running docker is available"


def _podman_has_a_package() -> bool:
    if not shutil.which("apt-cache"):
        return False
    policy = subprocess.run(["apt-cache", "policy", "podman"], capture_output=True, text=True, timeout=60).stdout
    return bool(re.search(r"Candidate: (?!\(none\))\S+", policy))


@pytest.mark.skipif(not (os.environ.get("CI") or os.environ.get("FEDCD_TEST_IMAGE") == "1"),
                    reason="minutes: runs in CI or with FEDCD_TEST_IMAGE=1 (or: make image image-test)")
def test_the_image_builds_and_answers_the_readmes_first_diagnosis() -> None:
    engine, why = _engine_or_reason()
    if engine is None:
        if not _podman_has_a_package():
            pytest.skip(f"{why}, and this system has no podman package to install")
        pytest.fail(f"{why}, although podman is installable here: .ci/run's install failed "
                    f"({os.environ.get('FEDCD_CI_PODMAN', 'no record')}); the image was not tested")
    build = subprocess.run(["make", "image", f"IMAGE={TAG}", f"CONTAINER_ENGINE={engine}"], cwd=ROOT,
                           capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    assert build.returncode == 0, f"make image failed:\n{build.stdout[-3000:]}\n{build.stderr[-5000:]}"
    smoke = subprocess.run(["make", "image-test", f"IMAGE={TAG}", f"CONTAINER_ENGINE={engine}"], cwd=ROOT,
                           capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    assert smoke.returncode == 0, f"make image-test failed:\n{smoke.stdout[-3000:]}\n{smoke.stderr[-5000:]}"
    seen = json.loads(smoke.stdout.split("image-test: passed ", 1)[1].splitlines()[0])
    assert seen["uid"] != 0 and seen["read_only_root"] and seen["stopped_cleanly"]
    assert seen["concepts"] > 0 and {"smollm2", "gemma3"} & set(seen["entities"])

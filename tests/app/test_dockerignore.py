""".dockerignore: `docker build` sends what docker/Dockerfile COPYs and none of the secrets, state or caches;
and git tracks no test cache (schemathesis's rewrites itself on every run).

No Docker engine here: the patterns are read with Docker's own rules (moby/patternmatcher: Go filepath.Match
per segment, ``**`` for any number of folders, a pattern that matches a parent folder matches what is inside,
the last matching pattern wins, ``!`` re-includes).
"""

from __future__ import annotations

import os
import posixpath
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = sorted((ROOT / "docker").glob("Dockerfile*"))


def _regex(pattern: str) -> re.Pattern[str]:
    out, i = "^", 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*":
            if pattern[i + 1:i + 2] == "*":
                i += 1
                if pattern[i + 1:i + 2] == "/":
                    i += 1
                out += ".*" if i + 1 == len(pattern) else "(.*/)?"
            else:
                out += "[^/]*"
        elif ch == "?":
            out += "[^/]"
        elif ch == "[":
            end = pattern.index("]", i)
            out += pattern[i:end + 1]
            i = end
        elif ch == "\\" and i + 1 < len(pattern):
            i += 1
            out += re.escape(pattern[i])
        else:
            out += re.escape(ch)
        i += 1
    return re.compile(out + "$")


class DockerIgnore:
    def __init__(self, text: str) -> None:
        self.patterns: list[tuple[bool, str, re.Pattern[str]]] = []
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            cleaned = posixpath.normpath(line[1:].strip() if negate else line).lstrip("/")
            self.patterns.append((negate, cleaned, _regex(cleaned)))

    def excluded(self, path: str) -> bool:
        parent = posixpath.dirname(path)
        parents = parent.split("/") if parent else []
        matched = False
        for negate, _, regex in self.patterns:
            if negate != matched:  # an inclusion only matters once excluded, an exclusion only before
                continue
            hit = bool(regex.match(path)) or any(regex.match("/".join(parents[:k + 1])) for k in range(len(parents)))
            if hit:
                matched = not negate
        return matched


@pytest.fixture(scope="module")
def ignore() -> DockerIgnore:
    return DockerIgnore((ROOT / ".dockerignore").read_text())


def _copy_sources(dockerfile: Path) -> list[str]:
    """Build-context paths the Dockerfile COPYs or ADDs (not ``--from`` another stage)."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    sources = []
    for line in text.splitlines():
        words = shlex.split(line.split(" #", 1)[0]) if line.strip() and not line.lstrip().startswith("#") else []
        if words and words[0].upper() in ("COPY", "ADD"):
            args = [w for w in words[1:] if not w.startswith("--")]
            if any(w.startswith("--from") for w in words[1:]):
                continue
            sources += args[:-1]
    return sources


def _files_under(source: str) -> list[str]:
    base = ROOT / source
    if base.is_file():
        return [source]
    found = []
    for folder, dirs, files in os.walk(base):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        found += [str((Path(folder) / f).relative_to(ROOT)) for f in files if not f.endswith(".pyc")]
    return found


def test_the_dockerfiles_copy_something() -> None:
    assert DOCKERFILES and all(_copy_sources(d) for d in DOCKERFILES)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda d: d.name)
def test_everything_the_dockerfile_copies_is_sent(ignore: DockerIgnore, dockerfile: Path) -> None:
    for source in _copy_sources(dockerfile):
        files = _files_under(source)
        assert files, f"{dockerfile.name} copies {source}, which is not in the repository"
        assert [f for f in files if ignore.excluded(f)] == [], f"{source} is (partly) left out of the build context"
    # the package data pip installs from them (pyproject: package-data) goes too
    assert not ignore.excluded("qmatrix/data/example_qmatrix.json")
    assert not ignore.excluded("app/migrations/versions/0001_initial_schema.py")


@pytest.mark.parametrize("path", [
    ".venv/bin/python", ".venv-litellm/bin/litellm",
    ".fedcd/dev-api-key", ".fedcd/fedcd.db", ".fedcd/server-secret", "app/.fedcd/fedcd.db",
    "certs/ca.key", "certs/ca.pem", "certs/nodes/node-1.key", "node-1/node.key", "app/certs/x.key", "federated/x.key",
    ".git/HEAD", ".git/objects/ab/cdef",
    ".schemathesis/cache.json", "tests/fuzz/.schemathesis/x", ".hypothesis/examples/x", ".pytest_cache/v/x",
    "app/__pycache__/main.cpython-311.pyc", "app/main.pyc", ".ruff_cache/x", ".mypy_cache/x",
    "fedcd.egg-info/PKG-INFO", "build/lib/app/main.py", "dist/fedcd.whl", ".coverage", "reports/junit.xml",
    "fedcd.db", "state.db-wal", "model.gguf", "providers/model.gguf", ".env", "docker/.env",
    "tests/app/test_auth.py", "docs/results/README.md", "shared/data/x.csv",
])
def test_secrets_state_and_caches_stay_out(ignore: DockerIgnore, path: str) -> None:
    assert ignore.excluded(path)


def test_the_matcher_follows_dockers_rules() -> None:
    # the reader of this test, checked on the cases its rules name
    rules = DockerIgnore("*\n!app\n**/*.key\n!app/keep.key\nsub/**/x\n")
    assert rules.excluded("README.md") and rules.excluded("docs/a/b.md")  # `*` matches a top folder, so its files
    assert not rules.excluded("app/main.py") and not rules.excluded("app/a/b.py")
    assert rules.excluded("app/a/b.key") and not rules.excluded("app/keep.key")  # the last match wins
    assert DockerIgnore("sub/**/x").excluded("sub/x") and DockerIgnore("sub/**/x").excluded("sub/a/b/x/y")


def test_test_caches_are_neither_tracked_nor_trackable() -> None:
    # schemathesis and hypothesis rewrite their caches on every run: they must never show up as changes
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True, check=True,
                             timeout=60).stdout.splitlines()
    caches = (".schemathesis", ".hypothesis", ".pytest_cache", "__pycache__")
    assert [p for p in tracked if any(part in caches for part in p.split("/"))] == []
    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--no-index", ".schemathesis/cache",
                              "tests/fuzz/.schemathesis/cache"], capture_output=True, text=True, timeout=60)
    assert ignored.stdout.split() == [".schemathesis/cache", "tests/fuzz/.schemathesis/cache"]

"""Image builder decisions that need no engine: Python version table, apt mirror discovery, tags."""

from __future__ import annotations

import pytest
from pinpoint.environments import images
from pinpoint.environments.images import (
    DEFAULT_MIRROR,
    UnsupportedPythonVersion,
    apt_mirror,
    base_tag,
    ensure_base_image,
    nearest_suite_version,
    split_tag,
)


@pytest.mark.parametrize(("wanted", "nearest"), [("3.10", "3.9"), ("3.12", "3.11"), ("3.8", "3.9"), ("3.11", "3.11")])
def test_nearest_version_prefers_the_older_on_a_tie(wanted, nearest):
    assert nearest_suite_version(wanted) == nearest


@pytest.mark.parametrize("bad", ["3", "py3.11", "3.11.4", "2.7x"])
def test_malformed_python_versions_are_named(bad):
    with pytest.raises(UnsupportedPythonVersion, match=repr(bad).replace(".", r"\.")):
        ensure_base_image(bad)


def test_mirror_from_deb822_sources_skips_security(tmp_path, monkeypatch):
    monkeypatch.delenv("PINPOINT_DEBIAN_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n")
    assert apt_mirror(tmp_path) == "http://mirror.example/debian"


def test_mirror_from_one_line_list_with_options(tmp_path, monkeypatch):
    monkeypatch.delenv("PINPOINT_DEBIAN_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text("# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://m.example/debian bookworm main\n")
    assert apt_mirror(tmp_path) == "http://m.example/debian"


def test_mirror_defaults_and_can_be_overridden(tmp_path, monkeypatch):
    monkeypatch.delenv("PINPOINT_DEBIAN_MIRROR", raising=False)
    assert apt_mirror(tmp_path) == DEFAULT_MIRROR
    monkeypatch.setenv("PINPOINT_DEBIAN_MIRROR", "http://local/debian")
    assert apt_mirror(tmp_path) == "http://local/debian"


def test_split_tag():
    assert split_tag("pinpoint/base:py3.11") == ("pinpoint/base", "py3.11")
    assert split_tag("localhost:5000/img") == ("localhost:5000/img", "latest")
    assert split_tag("img") == ("img", "latest")


@pytest.mark.parametrize("packages", ["DEBOOTSTRAP_PACKAGES", "SLIM_PACKAGES"])
def test_a_changed_package_list_names_a_new_base_image(monkeypatch, packages):
    """A machine that built its base before a package joined the list (GNU patch) must not keep using it."""
    before = base_tag("3.11")
    assert before.startswith("pinpoint/base:py3.11-")
    monkeypatch.setattr(images, packages, getattr(images, packages).replace("patch", "patch,quilt"))
    assert base_tag("3.11") != before
    assert base_tag("3.9") != base_tag("3.11")

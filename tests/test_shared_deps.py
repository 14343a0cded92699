"""The reference layer holds the dependencies of the spec's install; the instance must still end with exactly what a
fresh install gives (swebench_eval/deps_box.py, scripts.reference_script / instance_deps_steps)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pinpoint.swebench_eval import deps_box
from pinpoint.swebench_eval.scripts import SHARED_DEPS, dry_run_install, env_script, reference_script
from pinpoint.swebench_eval.shared_pins import SHARED_PINS, env_pins
from pinpoint.swebench_eval.specs import EnvInputs

BOX = Path(deps_box.__file__)


def _dist(site: Path, name: str, version: str, requested: bool = False) -> Path:
    """A distribution as pip leaves it: METADATA, and RECORD listing its files (sorted, REQUESTED among them)."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    rows = [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
    if requested:
        (info / "REQUESTED").write_text("")
        rows.append(f"{info.name}/REQUESTED,,")
    (info / "RECORD").write_text("".join(row + "\n" for row in sorted(rows)))
    return info


def _box(site: Path, *args: str) -> subprocess.CompletedProcess:
    """deps_box in a Python that sees `site` alone (-S: none of the host's own distributions)."""
    return subprocess.run([sys.executable, "-S", str(BOX), *args], capture_output=True, text=True,
                          env={"PYTHONPATH": str(site)})


def _report(path: Path, *pins: tuple[str, str, bool]) -> Path:
    items = [{"metadata": {"name": n, "version": v}, "is_direct": direct} for n, v, direct in pins]
    path.write_text(json.dumps({"install": items}))
    return path


def test_the_reference_shares_only_what_the_env_lacks_and_leaves_it_unrequested(tmp_path):
    site = tmp_path / "site"
    _dist(site, "Jinja2", "3.0.3")
    (tmp_path / "env.json").write_text(json.dumps([["jinja2", "3.0.3"]]))
    report = _report(tmp_path / "r.json", ("Sphinx", "5.0", True), ("jinja2", "2.11.3", False),
                     ("Pygments", "2.18.0", False), ("docutils", "0.18.1", False))
    assert _box(site, "shared", str(report), str(tmp_path / "env.json"), str(tmp_path / "pins.txt")).returncode == 0
    # the project is the instance's, and an env distribution is left for the instance's own install to change
    assert (tmp_path / "pins.txt").read_text() == "Pygments==2.18.0\ndocutils==0.18.1\n"
    info = _dist(site, "Pygments", "2.18.0", requested=True)
    assert _box(site, "unrequest", str(tmp_path / "pins.txt")).returncode == 0
    assert not (info / "REQUESTED").exists()
    assert "REQUESTED" not in (info / "RECORD").read_text()


def test_the_instance_drops_what_a_fresh_resolution_picks_otherwise_and_checks_the_result(tmp_path):
    site = tmp_path / "site"
    _dist(site, "Jinja2", "3.0.3")
    env = tmp_path / "env.json"
    env.write_text(json.dumps([["jinja2", "3.0.3"]]))
    for name, version in (("Pygments", "2.18.0"), ("docutils", "0.19"), ("Cython", "3.0.10")):
        _dist(site, name, version)
    pins = tmp_path / "pins.txt"
    pins.write_text("Cython==3.0.10\nPygments==2.18.0\ndocutils==0.19\n")
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    assert _box(site, "hide", str(pins), str(hidden)).returncode == 0
    assert sorted(p.name for p in site.iterdir()) == ["Jinja2-3.0.3.dist-info"]  # the resolver sees the env alone
    assert _box(site, "unhide", str(hidden)).returncode == 0 and not hidden.exists()
    assert (site / "docutils-0.19.dist-info" / "METADATA").exists()

    # the fresh resolution (over the env alone) wants an older docutils and no Cython
    fresh = _report(tmp_path / "fresh.json", ("Sphinx", "4.1", True), ("Pygments", "2.18.0", False),
                    ("docutils", "0.17.1", False))
    assert _box(site, "drop", str(pins), str(fresh), str(tmp_path / "drop.txt")).returncode == 0
    assert (tmp_path / "drop.txt").read_text() == "Cython\ndocutils\n"

    failed = _box(site, "check", str(env), str(fresh))  # nothing dropped or installed yet: the check refuses
    assert failed.returncode == 1
    assert "differ from a fresh install's" in failed.stderr and "('cython', '3.0.10')" in failed.stderr
    for name in ("Cython-3.0.10", "docutils-0.19"):  # what `pip uninstall` and the spec's install then do
        subprocess.run(["rm", "-r", str(site / f"{name}.dist-info")], check=True)
    _dist(site, "docutils", "0.17.1")
    _dist(site, "Sphinx", "4.1")
    passed = _box(site, "check", str(env), str(fresh))
    assert passed.returncode == 0, passed.stderr


def test_the_env_installs_only_the_shared_pins_it_lacks(tmp_path):
    site = tmp_path / "site"
    _dist(site, "Jinja2", "3.0.3")
    _dist(site, "Pygments", "2.17.2")  # the spec's own packages brought another version: the env keeps it
    env = tmp_path / "env.json"
    assert _box(site, "snapshot", str(env)).returncode == 0
    wanted = tmp_path / "pins.txt"
    wanted.write_text("Babel==2.15.0\npygments==2.18.0\nCython==3.0.10\n")
    assert _box(site, "absent", str(wanted), str(env), str(tmp_path / "absent.txt")).returncode == 0
    assert (tmp_path / "absent.txt").read_text() == "Babel==2.15.0\nCython==3.0.10\n"


SPHINX = {"install": "python -m pip install -e .[test]", "pre_install": ["sed -i 's/pytest/pytest -rA/' tox.ini"]}


def test_the_layering_puts_a_repositorys_shared_pins_in_its_env_layer():
    """Stored once per env, not once per reference: the env step installs and records them (the reference step
    finds them installed and adds only what its own resolution lacks), and only for a plain pip install."""
    inputs = EnvInputs(python="3.9", packages="", packages_kind="none", pip_packages=("tox==4.16.0",))
    pins = env_pins("sphinx-doc/sphinx", SPHINX)
    assert pins == SHARED_PINS["sphinx-doc/sphinx"] and "Babel==2.15.0" in pins
    env = env_script(inputs, pins)
    assert "Babel==2.15.0" in env and f"{SHARED_DEPS}/shared.txt" in env and "install --no-deps" in env
    reference = reference_script(SPHINX)
    assert "Babel" not in reference and "snapshot /tmp/pinpoint-deps-installed.json" in reference
    assert SHARED_DEPS not in env_script(inputs)  # the plain env of the comparison layering
    assert env_pins("sphinx-doc/sphinx", {"install": "python setup.py develop"}) == ()
    assert env_pins("sympy/sympy", {"install": "python -m pip install -e ."}) == ()


def test_only_a_plain_pip_install_is_dry_run():
    assert dry_run_install({"install": "python -m pip install -e .[test]"}).startswith(
        "python -m pip install -e .[test] --dry-run")
    assert dry_run_install({"install": "python setup.py install"}) is None
    assert dry_run_install({"install": "python -m pip install -e . && make"}) is None
    assert dry_run_install({}) is None


def test_the_layer_is_plain_without_a_shared_install_and_drops_apts_caches_after_apt_get():
    assert reference_script(None) == reference_script({"install": "python setup.py install"})  # the tags of before
    sphinx_72 = {"install": "python -m pip install -e .[test]",
                 "pre_install": ["apt-get update && apt-get install -y graphviz"]}
    assert "/var/cache/apt/pkgcache.bin" in reference_script(sphinx_72)
    assert "/var/cache/apt/" not in reference_script({"install": "python -m pip install -e .[test]"})


#: prints, per distribution the box's Python sees: name, version, RECORD's hash and the RECORD paths whose file is
#: missing or differs from its recorded hash (the content of every file of the distribution)
FINGERPRINT = r"""
import base64, hashlib, json, os
from importlib import metadata
out = []
for d in metadata.distributions():
    record = d.read_text("RECORD") or ""
    bad = []
    for f in d.files or []:
        path = str(d.locate_file(f))
        if f.hash is None:
            continue
        if not os.path.exists(path):
            bad.append(str(f) + " missing")
            continue
        digest = base64.urlsafe_b64encode(hashlib.new(f.hash.mode, open(path, "rb").read()).digest()).rstrip(b"=")
        if digest.decode() != f.hash.value:
            bad.append(str(f) + " differs")
    out.append([d.metadata["Name"], d.version, hashlib.sha256(record.encode()).hexdigest(), sorted(bad)])
print(json.dumps(sorted(out)))
"""


def box_distributions(docker_client, tag: str) -> list:
    out = docker_client.containers.run(tag, ["python", "-c", FINGERPRINT], remove=True, network_mode="none")
    return json.loads(out.decode())


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("instance_id", ["psf__requests-1142", "sphinx-doc__sphinx-10466"])
def test_the_instance_over_shared_dependencies_has_the_distributions_of_a_fresh_install(docker_client, instance_id):
    """Names, versions and the files of every distribution equal those of the layering without shared
    dependencies; sphinx-10466's reference resolves another docutils than its row, which the instance replaces."""
    from pinpoint.swebench_eval.datasets import load_instances
    from pinpoint.swebench_eval.images import build_instance_image, top_layer_files

    instance = load_instances(ids=[instance_id])[0]
    shared = build_instance_image(instance)
    fresh = build_instance_image(instance, shared_deps=False)
    assert shared.plan.reference_tag != fresh.plan.reference_tag
    assert box_distributions(docker_client, shared.tag) == box_distributions(docker_client, fresh.tag)
    in_layer = top_layer_files(shared.tag)
    assert not any(path.startswith("var/lib/pinpoint-shared-deps/") for path in in_layer)

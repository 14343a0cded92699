"""Pooled grading (swebench_eval.pooled): the official eval script as typed steps, the overlay change detector, and a
warm grader box on a real row that skips the reinstall it already did, removes what a patch's tests planted outside
the tree, and is recreated when an image file was changed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pinpoint.environments.overlay import Layers, changes
from pinpoint.swebench_eval import eval_steps
from pinpoint.swebench_eval.datasets import load_instances
from pinpoint.swebench_eval.scripts import eval_script
from pinpoint.swebench_eval.specs import spec_for

FLASK = "pallets__flask-5014"
REQUESTS = "psf__requests-2931"


def _script(instance_id: str) -> str:
    instance = load_instances(ids=[instance_id])[0]
    return eval_script(instance, spec_for(instance))


def test_the_official_script_parses_into_steps_that_give_it_back():
    for instance_id in (FLASK, REQUESTS):
        script = _script(instance_id)
        steps = eval_steps.parse(script)
        assert "\n".join(s.text for s in steps) + "\n" == script
        assert [s.text for s in steps if s.kind == "install"] == [spec_for(load_instances(ids=[instance_id])[0])["install"]]
        assert any(s.kind == "command" and s.text.startswith("git apply -v - <<") and s.text.count("\n") > 3
                   for s in steps)  # the test patch's heredoc is one step


def test_an_editable_install_depends_on_the_packaging_files_a_copying_one_on_every_file():
    assert "setup.py" in eval_steps.install_patterns(eval_steps.parse(_script(FLASK)))
    assert eval_steps.install_patterns(eval_steps.parse(_script(REQUESTS))) is None


def test_split_runs_the_install_apart_and_says_when_it_is_skipped():
    steps = eval_steps.parse(_script(FLASK))
    parts = eval_steps.split(steps, "same digest")
    assert parts.install.rstrip().endswith("\n: 'pinpoint: skipped `python -m pip install -e .`: same digest'")
    assert "git show" in parts.before and "pip install" not in parts.before + parts.after
    assert "pytest -rA" in parts.after and "pytest" not in parts.before + parts.install
    for part in (parts.install, parts.after):  # a new shell gets the env again
        assert part.startswith("#!/bin/bash\nset -uxo pipefail\nexport TZ=UTC") and "cd /testbed\n" in part
    assert eval_steps.split(steps).install.rstrip().endswith("\npython -m pip install -e .")


def test_a_pip_install_line_inside_a_heredoc_is_not_an_install_step():
    script = "#!/bin/bash\ngit apply - <<'EOF_1'\npip install evil\nEOF_1\npytest\n"
    steps = eval_steps.parse(script)
    assert [s.kind for s in steps] == ["header", "command", "command"]
    assert not eval_steps.has_install(steps) and eval_steps.split(steps).before == script


def _layers(tmp_path: Path) -> Layers:
    upper, lower = tmp_path / "upper", tmp_path / "lower"
    (lower / "usr/lib").mkdir(parents=True)
    (lower / "usr/lib/site.py").write_text("image\n")
    (lower / "etc").mkdir()
    (lower / "etc/conf").write_text("image\n")
    (upper / "usr/lib").mkdir(parents=True)
    return Layers(upper, (lower,))


def test_overlay_changes_tell_new_files_from_changed_image_files(tmp_path):
    layers = _layers(tmp_path)
    (layers.upper / "usr/lib/installed.pth").write_text("baseline\n")
    baseline = layers.listing(())
    (layers.upper / "usr/lib/planted.pth").write_text("import os\n")
    (layers.upper / "tmp/pytest-of-root/p0").mkdir(parents=True)
    (layers.upper / "tmp/pytest-of-root/p0/f").write_text("x")
    found = changes(layers, baseline, layers.listing(()))
    assert found.new == ["/tmp", "/usr/lib/planted.pth"] and found.changed == []
    (layers.upper / "usr/lib/site.py").write_text("modified\n")  # an image file copied up
    (layers.upper / "usr/lib/installed.pth").write_text("moved\n")
    assert changes(layers, baseline, layers.listing(())).changed == ["/usr/lib/installed.pth", "/usr/lib/site.py"]
    (layers.upper / "usr/lib/installed.pth").unlink()
    assert "/usr/lib/installed.pth" in changes(layers, baseline, layers.listing(())).changed
    assert layers.listing(("/usr",)).keys() == {"/tmp", "/tmp/pytest-of-root", "/tmp/pytest-of-root/p0",
                                                 "/tmp/pytest-of-root/p0/f"}


@pytest.mark.skipif(os.geteuid() != 0, reason="a whiteout is a 0/0 character device: mknod needs root")
def test_overlay_a_deleted_image_file_is_a_change(tmp_path):
    layers = _layers(tmp_path)
    baseline = layers.listing(())
    (layers.upper / "etc").mkdir()
    os.mknod(layers.upper / "etc/conf", 0o600 | 0o020000, os.makedev(0, 0))
    assert changes(layers, baseline, layers.listing(())).changed == ["/etc/conf"]


@pytest.fixture(scope="module")
def flask_box(docker_client):
    """A primed grader box of the flask row (its image built here when missing), as the RL pool hands one out."""
    from pinpoint.swebench_eval.images import build_instance_image
    from pinpoint.swebench_eval.pooled import prime
    from pinpoint.swebench_eval.runtime import instance_runtime

    instance = load_instances(ids=[FLASK])[0]
    box = instance_runtime(instance, build_instance_image(instance).tag, grading=True)
    try:
        prime(box, instance)
        yield instance, box
    finally:
        box.close()


def _plant(instance, first_line: str, code: str) -> str:
    """The gold patch plus `code` run first when the package is imported (by the tests)."""
    marker = "diff --git a/src/flask/__init__.py b/src/flask/__init__.py"
    assert marker not in instance.patch
    return instance.patch + (f"{marker}\n--- a/src/flask/__init__.py\n+++ b/src/flask/__init__.py\n@@ -1,1 +1,2 @@\n"
                             f"+{code}\n {first_line}\n")


@pytest.mark.docker
@pytest.mark.slow
def test_a_warm_box_skips_the_reinstall_and_undoes_what_the_tests_left(flask_box, tmp_path):
    from pinpoint.swebench_eval.evaluate import evaluate_patch
    from pinpoint.swebench_eval.pooled import state_of

    instance, box = flask_box
    first = box.read_text("src/flask/__init__.py").splitlines()[0]
    verdict = evaluate_patch(instance, instance.patch, runtime=box, warm=True, out_dir=tmp_path / "gold")
    assert verdict.outcome == "resolved"
    assert "pinpoint: skipped `python -m pip install -e .`" in (tmp_path / "gold/test_output.txt").read_text()

    site = box.run("python -c 'import sysconfig; print(sysconfig.get_path(\"purelib\"))'").output.strip()
    planted = f"{site}/zz_planted.pth"
    patch = _plant(instance, first, f"open({planted!r}, 'w').write('import sys; sys.exit(3)\\n')")
    assert evaluate_patch(instance, patch, runtime=box, warm=True).outcome == "resolved"
    assert box.run(f"test -e {planted}").exit_code == 0  # the tests planted it outside the tree
    verdict = evaluate_patch(instance, "", runtime=box, warm=True)
    assert verdict.outcome == "unresolved" and verdict.test_exit_code == 1  # the tests ran (a planted .pth exits 3)
    assert "1 new paths outside it removed" in state_of(box).last_reset
    assert box.run(f"test -e {planted}").exit_code == 1

    container = box.container.id
    image_file = f"{site}/markupsafe/__init__.py"
    before = box.read_file(image_file)
    patch = _plant(instance, first, f"open({image_file!r}, 'a').write('\\nraise ImportError\\n')")
    evaluate_patch(instance, patch, runtime=box, warm=True)
    verdict = evaluate_patch(instance, instance.patch, runtime=box, warm=True)
    assert state_of(box).last_reset.startswith("recreated (changed outside the tree")
    assert box.container.id != container and box.read_file(image_file) == before
    assert verdict.outcome == "resolved"


def _tree_of(tmp_path: Path, names: tuple[str, ...]):
    from pinpoint.environments.container_server import Tree

    root = tmp_path / "tree"
    (root / "pkg").mkdir(parents=True)
    for name in names:
        (root / f"pkg/{name}.py").write_text(f"X = {name!r}\n")
    return root, Tree(str(root), str(tmp_path / "store"), "base", 1 << 30)


def _compiled(root: Path, name: str) -> Path:
    import py_compile

    return Path(py_compile.compile(str(root / f"pkg/{name}.py"), doraise=True))


def test_a_reset_keeping_bytecode_keeps_only_the_trusted_bytecode_of_unchanged_base_files(tmp_path):
    root, tree = _tree_of(tmp_path, ("a", "b", "d"))
    a_pyc, b_pyc = _compiled(root, "a"), _compiled(root, "b")
    assert tree.trust_bytecode().result["trusted"] == 2  # what priming compiled, before any patch ran
    d_pyc = _compiled(root, "d")  # a base module first compiled by a patch's tests: not trusted
    (root / "pkg/b.py").write_text("X = 'patched'\n")
    _compiled(root, "b")
    (root / "pkg/c.py").write_text("X = 'new'\n")
    c_pyc = _compiled(root, "c")
    tree.reset(keep_bytecode=True)
    assert a_pyc.exists() and not b_pyc.exists() and not c_pyc.exists() and not d_pyc.exists()
    assert (root / "pkg/b.py").read_text() == "X = 'b'\n" and not (root / "pkg/c.py").exists()
    tree.reset()
    assert not a_pyc.exists() and not (root / "pkg/__pycache__").exists()


def test_bytecode_a_patch_forged_for_an_unchanged_module_does_not_reach_the_next_grading(tmp_path):
    import marshal

    root, tree = _tree_of(tmp_path, ("a",))
    a_pyc = _compiled(root, "a")
    tree.trust_bytecode()
    genuine = a_pyc.read_bytes()
    # the forger keeps the header (the source's mtime and size), so Python would load the forged code
    forged = genuine[:16] + marshal.dumps(compile("X = 'forged'", "a", "exec"))
    a_pyc.write_bytes(forged)
    tree.reset(keep_bytecode=True)
    assert not a_pyc.exists() and (root / "pkg/a.py").read_text() == "X = 'a'\n"


def test_the_install_digest_follows_the_packaging_files_not_the_modules_nor_bytecode(tmp_path):
    from pinpoint.environments.container_server import digest
    from pinpoint.environments.wire import Digest

    (tmp_path / "pkg/__pycache__").mkdir(parents=True)
    (tmp_path / "setup.py").write_text("setup()\n")
    (tmp_path / "pkg/_version.py").write_text("v = '1'\n")
    (tmp_path / "pkg/mod.py").write_text("x = 1\n")

    def relevant() -> str:
        return digest(Digest(str(tmp_path), list(eval_steps.INSTALL_RELEVANT), False)).result["sha256"]

    base = relevant()
    (tmp_path / "pkg/mod.py").write_text("x = 2\n")
    (tmp_path / "pkg/__pycache__/_version.cpython-311.pyc").write_bytes(b"bytecode")
    assert relevant() == base
    (tmp_path / "setup.py").write_text("setup(name='other')\n")
    assert relevant() != base
    everything = digest(Digest(str(tmp_path), None, False)).result["sha256"]
    (tmp_path / "pkg/mod.py").write_text("x = 3\n")
    assert digest(Digest(str(tmp_path), None, False)).result["sha256"] != everything

"""pinpoint in the official SWE-bench images' layout: repo at /testbed, its Python the conda env `testbed` under
/opt/miniconda3 (active only after `source /opt/miniconda3/bin/activate testbed`).

No registry answers here, so the image is made locally in that layout: a FAKE conda (an `activate` script that
sets what conda's sets, and envs/testbed a venv of the base's Python 3.9, not the host's 3.11) over a requests
row's checkout, with the row's packages moved into the env so nothing runs unless the env is active. It is tagged
with the official name under a mirror namespace, as a user's pull would leave it."""

from __future__ import annotations

import json
import platform
import sys

import pytest
from fake_llm_server import FakeScriptedLLMServer, tool_call
from pinpoint.cli import main
from pinpoint.environments.errors import UsageError
from pinpoint.swebench_eval.datasets import load_instances
from pinpoint.swebench_eval.official import OFFICIAL_ENV, namespace, official_tag
from test_agent_docker import gold_edits

INSTANCE = "psf__requests-1142"
MIRROR = "localhost:5000/swebench"
SITE = "/usr/local/lib/python3.9/dist-packages"
ENV = "/opt/miniconda3/envs/testbed"
#: the FAKE conda: a venv of the base's python3.9 that sees only what is moved into it, and an activate script
FAKE_CONDA = f"""set -eux
python3 -m venv --system-site-packages --without-pip {ENV}
cp -a {SITE}/. {ENV}/lib/python3.9/site-packages/
rm -rf {SITE}/*
for tool in pytest py.test pip pip3 wheel; do
  sed '1s|.*|#!{ENV}/bin/python|' /usr/local/bin/$tool > {ENV}/bin/$tool && chmod 755 {ENV}/bin/$tool
done
rm -f /usr/local/bin/python /usr/local/bin/pytest /usr/local/bin/py.test /usr/local/bin/pip* /usr/local/bin/wheel
mkdir -p /opt/miniconda3/bin
cat > /opt/miniconda3/bin/activate <<'EOF'
# FAKE conda activation: the variables `conda activate NAME` sets
_prefix=/opt/miniconda3/envs/${{1:-base}}
[ -d "$_prefix" ] || return 1
export CONDA_PREFIX="$_prefix" CONDA_DEFAULT_ENV="${{1:-base}}" CONDA_SHLVL=1 PATH="$_prefix/bin:$PATH"
EOF
"""


def test_official_names_and_namespace(monkeypatch):
    assert official_tag("django__django-11099", "swebench") == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    monkeypatch.setenv(OFFICIAL_ENV, "mirror.example:5000/swebench/")
    assert namespace() == "mirror.example:5000/swebench"
    monkeypatch.setenv(OFFICIAL_ENV, "")
    assert namespace() is None
    monkeypatch.setenv(OFFICIAL_ENV, "Docker Hub")
    with pytest.raises(UsageError, match="PINPOINT_OFFICIAL_IMAGES"):
        namespace()


def test_a_synthesized_row_runs_in_its_source_rows_official_image(monkeypatch):
    """A task `rl synthesize` made from a row is that row's image plus a setup patch: with a mirror set, it looks up
    the source row's official image, never one named after the task (which no registry has)."""
    import dataclasses

    from pinpoint.swebench_eval import official

    looked_up: list[str] = []
    monkeypatch.setattr(official, "image_exists", lambda tag: looked_up.append(tag) or True)
    monkeypatch.setenv(OFFICIAL_ENV, MIRROR)
    row = dataclasses.replace(load_instances(ids=[INSTANCE])[0], instance_id=f"{INSTANCE}.synth-0123456789ab",
                              setup_patch="diff --git a/x b/x\n")
    found = official.official_image(row, log=lambda line: pytest.fail(line))
    assert found is not None and found.tag == official_tag(INSTANCE, MIRROR) and looked_up == [found.tag]


@pytest.fixture(scope="module")
def official(docker_client):
    """The row's image in the official layout, under its official name in MIRROR."""
    from pinpoint.environments.images import commit_build_step
    from pinpoint.swebench_eval.images import build_instance_image

    instance = load_instances(ids=[INSTANCE])[0]
    tag = official_tag(INSTANCE, MIRROR)
    # the label cleared: an image pinpoint did not build
    commit_build_step(build_instance_image(instance).tag, FAKE_CONDA, tag, network=False,
                      labels={"pinpoint.swebench": ""},
                      changes=["ENV PATH=/opt/miniconda3/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"])
    yield instance, tag
    docker_client.images.remove(tag, force=True)


@pytest.mark.docker
def test_without_activation_the_image_has_no_test_tools(official, docker_client):
    _, tag = official
    out = docker_client.containers.run(tag, ["bash", "-c", "python3 -c 'import pytest' 2>&1 || echo missing"],
                                       remove=True, network_mode="none")
    assert b"missing" in out


@pytest.mark.docker
@pytest.mark.slow
def test_run_trace_and_grading_inside_the_official_layout(official, tmp_path, monkeypatch):
    from pinpoint.swebench_eval.evaluate import evaluate_patch
    from pinpoint.swebench_eval.official import box_layout
    from pinpoint.swebench_eval.pooled import prime
    from pinpoint.swebench_eval.runtime import instance_runtime

    instance, tag = official
    monkeypatch.setenv(OFFICIAL_ENV, MIRROR)
    python = box_layout(tag).python
    assert python.startswith("3.9.") and python != platform.python_version() and sys.version_info[:2] != (3, 9)
    with instance_runtime(instance, tag) as box:
        assert box.channel == "server"  # the command server runs on the env's Python
        assert box.run("python -c 'import sys; print(sys.prefix)'").output.strip() == ENV

    # `pinpoint run` (oracle mode: the tracer runs the failing tests) with `--evaluate` (a fresh grader box)
    script = [tool_call("str_replace_editor", e) for e in gold_edits(instance.patch)]
    script += [tool_call("submit", {}), tool_call("submit", {})]
    with FakeScriptedLLMServer(script) as fake:
        code = main(["run", INSTANCE, "--evaluate", "--output", str(tmp_path), "--set", "search.policy=none",
                     "--run-id", "official", "--set", "agent.oracle_tests=true",
                     "--set", f"llm.base_url={fake.base_url}", "--set", "llm.model=fake-official"])
    assert code == 0
    run = tmp_path / "official" / "fake-official"
    trajectory = json.loads((run / "trajectories" / INSTANCE / "trajectory.json").read_text())
    assert trajectory["image"] == tag
    (execution,) = [e for e in trajectory["events"] if e["kind"] == "execution"]
    assert execution["failing"] == list(instance.FAIL_TO_PASS)
    assert "requests/models.py" in {s["path"] for s in trajectory["suspects"][:10]}
    (pred,) = [json.loads(line) for line in (run / "preds.jsonl").read_text().splitlines()]
    assert pred["resolved"] is True

    # `pinpoint eval` in a fresh box, with no repository source at all: the official image is all it needs
    (tmp_path / "no-sources").mkdir()
    assert main(["eval", "--predictions", str(run / "preds.jsonl"), "--output", str(tmp_path / "graded"),
                 "--run-id", "replay", "--instance", INSTANCE, "--source", str(tmp_path / "no-sources")]) == 0
    assert json.loads((tmp_path / "graded" / "replay" / "summary.json").read_text())["resolved_instances"] == 1

    # pooled grading: one primed box graded twice, reset in place
    with instance_runtime(instance, tag, grading=True) as box:
        prime(box, instance)
        assert evaluate_patch(instance, instance.patch, runtime=box, warm=True).outcome == "resolved"
        assert evaluate_patch(instance, "", runtime=box, warm=True).outcome != "resolved"


@pytest.mark.docker
def test_an_unreachable_mirror_falls_back_to_pinpoints_own_image(monkeypatch, capsys, docker_client):
    from pinpoint.swebench_eval.images import build_instance_image

    monkeypatch.setenv(OFFICIAL_ENV, "localhost:1/swebench")
    record = build_instance_image(load_instances(ids=[INSTANCE])[0])
    assert record.official is None and record.tag.startswith("pinpoint-swe-instance:")
    assert "official image localhost:1/swebench/sweb.eval.x86_64.psf_1776_requests-1142:latest not available" \
        in capsys.readouterr().err

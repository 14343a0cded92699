"""`pinpoint-lab bench soak` in small, on a real repository image: nothing may leak."""

from __future__ import annotations

import json

import pytest
from pinpoint_lab.cli import main as lab


@pytest.mark.docker
def test_bench_soak_small_leaves_nothing_behind(requests_image, tmp_path, capsys):
    """The soak in small (the full one is `pinpoint-lab bench soak`): resets stay clean, commands answer, environments
    started at once all work, and nothing is left: fds, threads, child processes, containers, temp folders, disk."""
    out = tmp_path / "soak.json"
    code = lab(["bench", "soak", "--image", requests_image, "--resets", "20", "--commands", "20",
           "--concurrent", "4", "--json", str(out)])
    figures = json.loads(out.read_text())
    assert code == 0, figures
    assert figures["one_environment"]["dirty_after_reset"] == 0 and figures["at_once"]["failures"] == 0
    assert all(value <= 0 for value in figures["leaked"].values()), figures["leaked"]
    assert "leaked after the soak: fds" in capsys.readouterr().out

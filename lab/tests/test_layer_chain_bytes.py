"""lab/scripts/layer_chain_bytes.py: a chain link counts only what changed since the previous commit in time."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "layer_chain_bytes.py"
_spec = importlib.util.spec_from_file_location("layer_chain_bytes", SCRIPT)
layer_chain_bytes = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = layer_chain_bytes  # dataclasses look their module up there
_spec.loader.exec_module(layer_chain_bytes)


def _commit(repo: Path, when: int, files: dict[str, str]) -> str:
    for name, text in files.items():
        (repo / name).write_text(text)
    env = {**os.environ, "GIT_COMMITTER_DATE": f"{when} +0000", "GIT_AUTHOR_DATE": f"{when} +0000"}
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c"],
                   check=True, env=env)
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_links_follow_commit_time_and_hold_only_the_changed_files(tmp_path):
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    old = _commit(repo, 1_600_000_000, {"big.py": "x = 1\n" * 1000, "small.py": "y = 2\n"})
    new = _commit(repo, 1_700_000_000, {"small.py": "y = 3\n"})
    links = layer_chain_bytes.chain(repo / ".git", [new, old])  # given out of order: sorted by committer time
    assert [link.commit for link in links] == [old, new]
    assert links[0].files == 6000 + 6
    assert links[1].files == 6  # big.py is unchanged: the link does not store it again
    assert 0 < links[1].objects < links[0].objects  # the new blob, the new root tree


def test_the_floor_counts_each_file_version_once_however_many_trees_hold_it(tmp_path):
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    first = _commit(repo, 1_600_000_000, {"a.py": "a\n" * 100})
    second = _commit(repo, 1_600_000_100, {"a.py": "b\n" * 100})
    third = _commit(repo, 1_600_000_200, {"a.py": "a\n" * 100})  # back to the first version
    least = layer_chain_bytes.floor(repo / ".git", [first, second, third])
    assert least.files == 400  # two distinct versions of a.py, 200 bytes each
    assert sum(link.files for link in layer_chain_bytes.chain(repo / ".git", [first, second, third])) == 600

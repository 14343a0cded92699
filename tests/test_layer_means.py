"""`pinpoint images list --layers`: per repository, what an instance costs above its env image."""

from __future__ import annotations

from pinpoint.swebench_eval.images import layer_means


def _row(repo: str, own: int, reference: int, sharing: int) -> dict:
    return {"repo": repo, "own_bytes": own, "reference_bytes": reference, "sharing": sharing,
            "amortized_bytes": own + (reference / sharing if sharing else 0)}


def test_a_reference_counts_whole_over_env_and_shared_when_amortized():
    rows = [_row("sympy/sympy", 2_000_000, 30_000_000, 2), _row("sympy/sympy", 4_000_000, 30_000_000, 2),
            _row("pallets/flask", 50_000, 0, 0)]
    flask, sympy = layer_means(rows)
    assert (sympy.repo, sympy.instances) == ("sympy/sympy", 2)
    assert sympy.own == 3_000_000
    assert sympy.over_env == 33_000_000  # each instance image carries the whole reference above the env
    assert sympy.amortized == 18_000_000  # the two instances on it pay half each
    assert (flask.repo, flask.own, flask.over_env) == ("pallets/flask", 50_000, 50_000)

"""`pinpoint-lab bench retrieval`: how well retrieval from the issue text localizes SWE-bench faults, beside a grep
baseline measured in the same run.

For each row with an offline repository, a LocalRuntime checks out `base_commit` and both rankers see only the
problem statement. Baseline: the repository's .py files ranked by how many of their lines contain a word of the issue
(`git grep -c -w`). Metrics against the reference patch: file Acc@k (a gold file among the top k files), and line
Hit@k (a gold line among the top k suspect lines; for a pure insertion, the line before which code is inserted).
"fused" is what the agent's localize node gets from the issue text: retrieval + lexical, reciprocal-rank fused.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from pinpoint.localization.fusion import reciprocal_rank_fusion, top_lines
from pinpoint.localization.retrieval import LexicalLocalizer, RetrievalLocalizer, is_test_path
from pinpoint.localization.suspects import LocalizationRequest
from pinpoint.swebench_eval.metrics import patch_gold_lines

KS = (1, 3, 5, 10)


def grep_baseline(runtime, text: str) -> list[str]:
    """The lexical signal alone: files ranked by the number of lines holding a word of the issue."""
    return [p for p, _ in LexicalLocalizer(runtime, max_files=30).ranked_files(text)]


def _files(suspects) -> list[str]:
    return list(dict.fromkeys(s.path for s in suspects))


def evaluate(instances: Iterable, log=print) -> dict:
    """Per-row hits for both rankers, and the totals."""
    from pinpoint.environments.local import LocalRuntime
    from pinpoint.environments.repo_image import extract_shared_repo

    rows = []
    for instance in instances:
        started = time.monotonic()
        gold = patch_gold_lines(instance.patch)
        repo = extract_shared_repo(instance.owner_name)
        with LocalRuntime(repo, instance.base_commit) as runtime:
            request = LocalizationRequest(problem_statement=instance.problem_statement)
            retrieval = reciprocal_rank_fusion({"retrieval": RetrievalLocalizer(runtime).localize(request)})
            fused = reciprocal_rank_fusion({"retrieval": RetrievalLocalizer(runtime).localize(request),
                                            "lexical": LexicalLocalizer(runtime).localize(request)})
            baseline = grep_baseline(runtime, instance.problem_statement)
        files = _files(retrieval)
        fused_files = _files(fused)
        lines = [(p, n) for p, n, _ in top_lines([s for s in fused if not is_test_path(s.path)], 10)]
        row = {"instance_id": instance.instance_id, "gold_files": sorted(gold),
               "retrieval_files": files[:10], "fused_files": fused_files[:10], "baseline_files": baseline[:10],
               "seconds": round(time.monotonic() - started, 2)}
        for k in KS:
            row[f"retrieval_file@{k}"] = bool(set(files[:k]) & set(gold))
            row[f"fused_file@{k}"] = bool(set(fused_files[:k]) & set(gold))
            row[f"baseline_file@{k}"] = bool(set(baseline[:k]) & set(gold))
            row[f"fused_line@{k}"] = any(n in gold.get(p, ()) for p, n in lines[:k])
        rows.append(row)
        log(f"{instance.instance_id}: file@1 retrieval {row['retrieval_file@1']!s:5} fused {row['fused_file@1']!s:5} "
            f"baseline {row['baseline_file@1']!s:5} line@10 {row['fused_line@10']!s:5} {row['seconds']}s")
    n = max(1, len(rows))
    totals = {key: sum(r[key] for r in rows) / n for key in rows[0] if "@" in key} if rows else {}
    return {"rows": rows, "n": len(rows), "totals": totals}


def format_table(result: dict) -> str:
    t = result["totals"]
    lines = [f"localization from the issue text, {result['n']} SWE-bench rows (baseline: grep, same run)",
             f"{'metric':<12}{'retrieval':>11}{'fused':>8}{'baseline':>10}{'fused/base':>12}"]
    for k in KS:
        r, f, b = (t.get(f"{name}_file@{k}", 0.0) for name in ("retrieval", "fused", "baseline"))
        ratio = f"{f / b:.2f}x" if b else "n/a"
        lines.append(f"{'file Acc@' + str(k):<12}{r:>11.2f}{f:>8.2f}{b:>10.2f}{ratio:>12}")
    for k in KS:
        lines.append(f"{'line Hit@' + str(k):<12}{'-':>11}{t.get(f'fused_line@{k}', 0.0):>8.2f}{'-':>10}")
    lines.append("fused = retrieval + lexical by reciprocal rank (the agent's issue-text signals)")
    return "\n".join(lines)

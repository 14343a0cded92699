"""The real embedded LLM (SmolLM2-135M on torch): token log-probs, caching, incremental mutant scoring, and the
diagnostic localizer and evaluation command on real buggy code. Loads the model once (about a minute on CPU)."""

import json
import math
from dataclasses import replace

import pytest
from pinpoint.localization.diagnostic import DEFAULT_CHECKPOINT, DiagnosticLocalizer
from pinpoint.localization.features import Vocabulary
from pinpoint.localization.model import SMALL, Checkpoint, DiagnosticModel
from pinpoint.localization.mutations import mutants
from pinpoint.localization.repair import RepairLocalizer, line_gains
from pinpoint.localization.scorer import LocalScorer, description_prefix
from pinpoint.localization.suspects import LocalizationRequest, Localizer
from pinpoint.localization.units import lexical_units
from pinpoint_lab.cli import main as lab
from pinpoint_lab.localization.corpora import bigcodebench_solutions, humanevalfix
from pinpoint_lab.localization.evaluation import candidate_lines, repair_on_top_ranker
from pinpoint_lab.localization.examples import build_examples

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def scorer(tmp_path_factory):
    return LocalScorer(cache_dir=tmp_path_factory.mktemp("cache") / "confidence")


def test_scorer_gives_finite_logprobs_that_tile_real_code(scorer):
    code = humanevalfix()[0].code
    tokens = scorer.score(code)
    assert all(math.isfinite(t.logprob) and t.logprob <= 0 for t in tokens)
    assert "".join(code[t.start : t.end] for t in tokens) == code
    assert scorer.is_cached(code)
    assert scorer.score(code) == tokens  # from the disk cache


def test_windows_and_batches_do_not_change_the_prefix(scorer):
    code = bigcodebench_solutions()[2].code
    small = LocalScorer(cache_dir=scorer.cache_dir / "small", window=96, context=32)
    small._model, small._tokenizer = scorer._load()
    full, windowed = scorer.score(code), small.score(code)
    assert len(full) == len(windowed) > 96
    first = small.window - small.context  # tokens the first window reports; later ones see only 32 tokens back
    assert all(abs(a.logprob - b.logprob) < 1e-3 for a, b in zip(full[:first], windowed[:first], strict=True))
    assert all(math.isfinite(t.logprob) for t in windowed)
    both = scorer.score_many([code, humanevalfix()[1].code])
    assert both[0] == full


def test_a_description_read_first_conditions_the_code_and_is_cached_apart(scorer):
    programs = humanevalfix()[:6]
    for program in programs:
        prefix = description_prefix(program.description)
        told, untold = scorer.score(program.code, prefix), scorer.score(program.code)
        assert [(t.start, t.end) for t in told] == [(t.start, t.end) for t in untold]  # offsets are into the code
        assert scorer.is_cached(program.code, prefix) and told != untold
        as_one_text = [t.logprob for t in scorer.score(prefix + program.code) if t.start >= len(prefix)]
        assert all(abs(a.logprob - b) < 1e-3 for a, b in zip(told, as_one_text, strict=True))
        # told what the function should do, the LLM finds its correct code more probable
        fixed_told, fixed_untold = (sum(t.logprob for t in scorer.score(program.fixed_code, pre))
                                    for pre in (prefix, ""))
        assert fixed_told > fixed_untold


@pytest.mark.parametrize("described", [False, True])
def test_mutants_are_scored_exactly_up_to_the_change_and_just_after(scorer, described):
    program = bigcodebench_solutions()[2]
    base, prefix = program.code, description_prefix(program.description) if described else ""
    muts = [m.code for m in mutants(base, 2, seed=1)]
    fast = scorer.score_mutants(base, muts, after=24, prefix=prefix)
    exact = LocalScorer(cache_dir=scorer.cache_dir / "exact")
    exact._model, exact._tokenizer = scorer._load()
    for code, approx, ref in zip(muts, fast, exact.score_many(muts, [prefix] * len(muts)), strict=True):
        assert [(t.start, t.end) for t in approx] == [(t.start, t.end) for t in ref]
        first = next(i for i, (a, b) in enumerate(zip(code, base, strict=False)) if a != b)
        near = [i for i, t in enumerate(ref) if t.end > first][:20]
        assert all(abs(approx[i].logprob - ref[i].logprob) < 1e-3 for i in range(near[-1] + 1))


def test_localizer_ranks_lines_of_real_buggy_code(scorer):
    program = humanevalfix()[0]
    localizer = DiagnosticLocalizer(DEFAULT_CHECKPOINT, scorer=scorer, top_k=3)
    as_signal: Localizer = localizer  # the agent's `localize` node takes any Localizer
    assert as_signal.name == "flare"
    ranked = localizer.rank_lines(program.code)
    code_lines = {i + 1 for i, text in enumerate(program.code.splitlines()) if text.strip()}
    assert {r.line for r in ranked} == code_lines
    assert [r.score for r in ranked] == sorted((r.score for r in ranked), reverse=True)
    request = LocalizationRequest(problem_statement=program.description,
                                  files={"close.py": program.code, "README.md": "# hi"})
    suspects = localizer.localize(request)
    assert len(suspects) == 3 and {s.path for s in suspects} == {"close.py"}
    assert all(s.signal == "flare" and "log-prob" in s.evidence for s in suspects)
    assert scorer.is_cached(program.code, description_prefix(program.description))  # the issue text was read


def test_eval_localization_prints_and_writes_the_table(scorer, tmp_path, monkeypatch, capsys):
    programs = humanevalfix()[:1]  # scored here, so the command finds them cached and loads no second model
    scorer.score_many([p.code for p in programs] * 2, [""] * len(programs) + [description_prefix(p.description) for p in programs])
    for p in programs:
        line_gains(p.code, scorer, p.description)
        line_gains(p.code, scorer)
    monkeypatch.setenv("PINPOINT_CACHE", str(scorer.cache_dir.parent))
    out = tmp_path / "eval.json"
    args = ["bench", "lines", "--sets", "humanevalfix,humanevalfix_docs", "--limit", "1", "--json", str(out)]
    assert lab(args) == 0  # the repair rows default to humanevalfix_docs alone
    assert "sbfl (ochiai)" in capsys.readouterr().out
    results = json.loads(out.read_text())["results"]
    common = {"diagnostic (FLARE)", "random line", "lowest confidence", "sbfl (ochiai)", "diagnostic + sbfl"}
    assert {r["method"] for r in results["humanevalfix"]} == common
    assert {r["method"] for r in results["humanevalfix_docs"]} == common | {
        "repair likelihood", "repair likelihood, code alone", "diagnostic + repair", "diagnostic + repair + sbfl"}
    for name in ("humanevalfix", "humanevalfix_docs"):
        assert all(r["n"] == 1 and 0 <= r["top1"] <= r["top3"] <= r["top10"] <= 1 for r in results[name])
    sbfl = {name: next(r for r in rows if r["method"] == "sbfl (ochiai)") for name, rows in results.items()}
    assert sbfl["humanevalfix"] == sbfl["humanevalfix_docs"]  # the tests do not read the docstring
    # agent.repair's reading: repairs of the model's top lines only, the docstring read first
    assert lab(["bench", "lines", "--sets", "humanevalfix_docs", "--limit", "1", "--repair-top", "2",
                "--json", str(out)]) == 0
    rows = {r["method"]: r for r in json.loads(out.read_text())["results"]["humanevalfix_docs"]}
    assert set(rows) == common | {"repair on top 2", "diagnostic + repair", "diagnostic + repair + sbfl"}


def test_repair_likelihood_points_at_a_real_bug_read_with_its_docstring(scorer):
    program = next(p for p in humanevalfix() if p.id == "Python/3")  # `balance == 0` should be `balance < 0`
    gains = line_gains(program.code, scorer, program.description)
    (bug,) = program.buggy_lines
    assert max(gains, key=gains.get) == bug and gains[bug] > 0  # its best repair makes the code more probable
    assert set(gains) < {i + 1 for i, text in enumerate(program.code.splitlines()) if text.strip()}
    assert line_gains(program.code, scorer, program.description, lines=[bug - 1, bug]) == {
        line: gains[line] for line in (bug - 1, bug)}


def test_repair_on_the_model_top_lines_reorders_only_those(scorer):
    program = next(p for p in humanevalfix() if p.id == "Python/3")  # `balance == 0` should be `balance < 0`
    (bug,) = program.buggy_lines
    lines = candidate_lines(build_examples([program], scorer)[0])
    model_order = [bug - 2, bug - 1, bug, *(n for n in lines if n not in {bug - 2, bug - 1, bug})]
    model = dict(zip(model_order, range(len(model_order), 0, -1), strict=True))  # a stand-in: the bug third
    rank = repair_on_top_ranker(lambda ex: model, scorer, {program.id: program.description}, top=3)
    scores = rank(build_examples([program], scorer)[0])
    ranked = sorted(scores, key=lambda line: -scores[line])
    assert ranked[0] == bug  # its repair is the most natural of the three
    assert set(ranked[:3]) == set(model_order[:3]) and ranked[3:] == model_order[3:]  # the rest keep the model's order


def test_a_model_that_reads_the_shift_reads_the_code_with_and_without_the_issue(scorer):
    program = humanevalfix()[10]  # not scored by the tests above
    config = replace(SMALL, confidence="all+shift")
    vocab = Vocabulary.build([lexical_units(program.code)])
    localizer = DiagnosticLocalizer(Checkpoint(config, vocab, DiagnosticModel(config, len(vocab)).state_dict()),
                                    scorer=scorer)
    assert localizer.reads_shift and not DiagnosticLocalizer(DEFAULT_CHECKPOINT, scorer=scorer).reads_shift
    ranked = localizer.rank_lines(program.code, description=program.description)
    assert scorer.is_cached(program.code, description_prefix(program.description)) and scorer.is_cached(program.code)
    assert {r.line for r in ranked} == {i + 1 for i, text in enumerate(program.code.splitlines()) if text.strip()}


def test_the_repair_signal_ranks_a_real_bug_in_a_method_first(scorer):
    """The agent's signal: the model's top lines of a repository-like file (a class, an unrelated method), their
    repairs scored within the dedented method after the issue text."""
    program = next(p for p in humanevalfix() if p.id == "Python/3")  # `balance == 0` should be `balance < 0`
    method = program.code.split("def below_zero(operations: List[int]) -> bool:\n")[1]
    text = ("import os\n\n\nclass Account:\n    def path(self, name):\n        return os.path.join(self.root, name)\n\n"
            "    def below_zero(self, operations):\n" + "".join(f"    {line}" if line.strip() else line
                                                          for line in method.splitlines(keepends=True)))
    bug = text.splitlines().index("            if balance == 0:") + 1
    request = LocalizationRequest(problem_statement=program.description, files={"bank.py": text, "README.md": "x"})
    suspects = RepairLocalizer(DiagnosticLocalizer(scorer=scorer), top_lines=20).localize(request)
    assert suspects[0].path == "bank.py" and suspects[0].start_line == bug and suspects[0].signal == "repair"
    assert {s.start_line for s in suspects} <= {i + 1 for i, t in enumerate(text.splitlines()) if t.strip()} - {1, 4}

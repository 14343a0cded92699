"""Retrieval localization and reciprocal-rank fusion on a real repository (psf/requests at a SWE-bench base commit)."""

from __future__ import annotations

from pinpoint.localization.fusion import fuse_localizers, reciprocal_rank_fusion, top_lines
from pinpoint.localization.retrieval import RetrievalLocalizer, body_span, extract_mentions
from pinpoint.localization.suspects import LocalizationRequest, Suspect

TRACEBACK = '''Traceback (most recent call last):
  File "/home/me/app.py", line 3, in <module>
    requests.get("https://example.org", proxies=proxies)
  File "/usr/lib/python3.8/site-packages/requests/api.py", line 75, in get
    return request('get', url, params=params, **kwargs)
  File "/usr/lib/python3.8/site-packages/requests/utils.py", line 975, in prepend_scheme_if_needed
    netloc, path = path, netloc
ValueError: boom
'''


def test_traceback_frames_resolve_to_repository_lines_deepest_first(local_requests):
    loc = RetrievalLocalizer(local_requests, "tests")
    suspects = loc.localize(LocalizationRequest(test_output=TRACEBACK))
    assert loc.name == "traceback"
    top = suspects[0]
    assert (top.path, top.start_line, top.end_line) == ("requests/utils.py", 975, 975)
    assert "netloc, path = path, netloc" in top.evidence  # the evidence quotes the line as it is in the repo
    assert ("requests/api.py", 75, 75) in {(s.path, s.start_line, s.end_line) for s in suspects}
    assert not any(s.path.endswith("app.py") for s in suspects)  # frames outside the repository are dropped


def test_issue_symbols_resolve_to_function_bodies_and_unique_names_rank_first(local_requests):
    issue = ("Proxy auth is lost: `prepend_scheme_if_needed` drops the user:password part of the proxy URL, "
             "so `get_auth_from_url` later finds nothing. Calling requests.get() shows it.")
    suspects = RetrievalLocalizer(local_requests).localize(LocalizationRequest(problem_statement=issue))
    spans = [(s.path, s.start_line) for s in suspects[:3]]
    assert spans[0][0] == "requests/utils.py"
    named = {s.evidence.split("`")[1] for s in suspects[:2]}
    assert named == {"prepend_scheme_if_needed", "get_auth_from_url"}
    source = local_requests.read_text("requests/utils.py")
    head = next(s for s in suspects if "prepend_scheme_if_needed" in s.evidence)
    # the span is the function's statements, not its signature or docstring
    assert head.start_line > 960 and not source.splitlines()[head.start_line - 1].strip().startswith(('"""', "def"))
    # `get` is defined in several places: it ranks below the unique names
    gets = [i for i, s in enumerate(suspects) if "`get`" in s.evidence]
    assert gets and min(gets) > 1


def test_paths_and_dotted_modules_in_the_issue_name_files(local_requests):
    issue = "The bug is in requests/cookies.py and also shows through requests.structures.CaseInsensitiveDict."
    suspects = RetrievalLocalizer(local_requests).localize(LocalizationRequest(problem_statement=issue))
    paths = [s.path for s in suspects]
    assert "requests/cookies.py" in paths and "requests/structures.py" in paths


def test_text_without_repository_names_gives_no_suspects(local_requests):
    issue = "It does not work on my machine, please help."
    assert RetrievalLocalizer(local_requests).localize(LocalizationRequest(problem_statement=issue)) == []


def test_mentions_prefer_code_like_names():
    names = [m.name for m in extract_mentions("Calling `parse_url()` in MyClass fails; the thing is broken")]
    assert set(names[:2]) == {"parse_url", "MyClass"}
    assert "thing" not in names and "the" not in names


def test_body_span_skips_docstring():
    source = 'def f(x):\n    """Doc."""\n    y = x\n    return y\n'
    assert body_span(source, 1) == (3, 4)


def _s(path, a, b, signal):
    return Suspect(path, a, b, 1.0, signal, f"{signal} says {path}:{a}")


def test_rrf_rewards_agreement_between_signals_and_overlap():
    retrieval = [_s("b.py", 1, 5, "retrieval"), _s("a.py", 10, 20, "retrieval")]
    traceback = [_s("a.py", 15, 15, "traceback"), _s("c.py", 2, 2, "traceback")]
    fused = reciprocal_rank_fusion({"retrieval": retrieval, "traceback": traceback})
    scores = {(s.path, s.start_line, s.end_line): s.score for s in fused}
    # retrieval alone puts b.py first; the traceback line inside retrieval's a.py span lifts a.py above it
    assert scores[("a.py", 15, 15)] > scores[("b.py", 1, 5)] > scores[("c.py", 2, 2)]
    assert scores[("a.py", 10, 20)] < scores[("a.py", 15, 15)]  # a broad span gains nothing from lines inside it
    # ties go to the narrower span
    assert (fused[0].path, fused[0].start_line, fused[0].end_line) == ("a.py", 15, 15)
    assert {v.signal: v.rank for v in fused[0].votes} == {"traceback": 1, "retrieval": 2}
    assert "[traceback #1]" in fused[0].describe() and "[retrieval #2]" in fused[0].describe()


def test_fuse_localizers_keeps_each_signal_and_any_new_signal_plugs_in():
    class Fixed:
        def __init__(self, name, suspects):
            self.name, self.suspects = name, suspects

        def localize(self, request):
            return self.suspects

    model = Fixed("diagnostic", [_s("c.py", 7, 7, "diagnostic")])
    fused, per_signal = fuse_localizers([Fixed("retrieval", [_s("c.py", 1, 9, "retrieval")]), model],
                                        LocalizationRequest())
    assert set(per_signal) == {"retrieval", "diagnostic"}
    assert (fused[0].path, fused[0].start_line) == ("c.py", 7)


def test_top_lines_walk_spans_without_letting_one_crowd_out_the_rest():
    suspects = [_s("a.py", 10, 40, "x"), _s("b.py", 3, 3, "x"), _s("a.py", 11, 11, "x")]
    lines = [(p, n) for p, n, _ in top_lines(suspects, 4)]
    assert lines == [("a.py", 11), ("b.py", 3)]  # the broad span gives the line a narrower suspect names in it
    alone = [_s("a.py", 10, 40, "x"), _s("b.py", 3, 3, "x")]
    assert [(p, n) for p, n, _ in top_lines(alone, 4)] == [("a.py", 10), ("a.py", 11), ("b.py", 3)]


def test_lexical_signal_ranks_files_by_issue_words_and_skips_tests(local_requests):
    from pinpoint.localization.retrieval import LexicalLocalizer

    issue = "Proxy authentication fails: the proxy URL keeps its netloc but the auth part is dropped."
    suspects = LexicalLocalizer(local_requests).localize(LocalizationRequest(problem_statement=issue))
    assert suspects and all(s.signal == "lexical" for s in suspects)
    assert not any(s.path.startswith("tests/") for s in suspects)
    assert "requests/utils.py" in [s.path for s in suspects[:5]]
    utils = next(s for s in suspects if s.path == "requests/utils.py")
    assert utils.start_line == 1 and utils.end_line == len(local_requests.read_text("requests/utils.py").splitlines())
    assert [s.score for s in suspects] == sorted((s.score for s in suspects), reverse=True)


def test_patch_gold_lines_cover_changed_lines_and_insertion_points():
    from pinpoint.swebench_eval.metrics import patch_gold_lines

    patch = ("diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1,4 +1,5 @@\n a = 1\n-b = 2\n+b = 3\n c = 3\n"
             "+d = 4\n e = 5\n")
    assert patch_gold_lines(patch) == {"m.py": {2, 4}}


def test_fusion_leads_with_the_spectrums_lines_in_its_top_file_only():
    from pinpoint.localization.fusion import fuse

    per_signal = {"retrieval": [_s("a.py", 1, 30, "retrieval"), _s("b.py", 5, 5, "retrieval")],
                  "spectrum": [_s("b.py", 9, 9, "spectrum"), _s("a.py", 12, 12, "spectrum"),
                               _s("a.py", 20, 20, "spectrum")]}
    fused = fuse(per_signal)
    assert [(s.path, s.start_line) for s in fused[:2]] == [("a.py", 12), ("a.py", 20)]  # a.py is fusion's top file
    assert fused[0].signal == "fusion" and ("b.py", 9) not in [(s.path, s.start_line) for s in fused[:2]]
    assert fuse({"retrieval": per_signal["retrieval"]})[0].path == "a.py"  # without a spectrum: plain RRF

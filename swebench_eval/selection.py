"""Which SWE-bench instances a command works on: one selection for `run`, `batch`, `eval` and the benchmarks.

Rows are filtered by id and repository, then those without an offline repository source are left out and named
(astropy, django, … have none here), so no command builds an environment for an instance it cannot check out.
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import zip_longest

from pinpoint.swebench_eval.datasets import Instance, load_instances
from pinpoint.swebench_eval.official import official_image
from pinpoint.swebench_eval.sources import RepoSources, SourceError


@dataclass
class Selection:
    instances: list[Instance]
    sources: RepoSources
    #: repositories left out for want of a source, with how many instances each
    missing: Counter = field(default_factory=Counter)

    def report_missing(self) -> None:
        """One line on stderr naming what was left out (nothing when nothing was)."""
        if self.missing:
            print(f"pinpoint: left out {sum(self.missing.values())} instances with no repository source: "
                  + ", ".join(f"{repo} ({n})" for repo, n in sorted(self.missing.items())), file=sys.stderr)


def select_instances(dataset: str | None = None, ids: list[str] | None = None, repos: list[str] | None = None, *,
                     sources: RepoSources | None = None, limit: int | None = None,
                     every: int | None = None) -> Selection:
    """The requested rows that have a repository source or an official image (every N-th, at most `limit`, when
    asked)."""
    sources = sources or RepoSources()
    selection = Selection([], sources)
    for instance in load_instances(dataset, ids or None, repos or None):
        try:
            sources.git_dir(instance.repo)
            selection.instances.append(instance)
        except SourceError:
            if official_image(instance) is not None:  # an official image needs no source (swebench_eval/official.py)
                selection.instances.append(instance)
                continue
            selection.missing[instance.repo] += 1
    selection.instances = selection.instances[:: every or 1][: limit or None]
    return selection


def select_one(instance_id: str, dataset: str | None = None, sources: RepoSources | None = None) -> Instance:
    """The one instance `pinpoint run` works on; SourceError (one line) when it has no repository source."""
    selection = select_instances(dataset, [instance_id], sources=sources)
    if not selection.instances:
        (repo,) = selection.missing
        raise SourceError(f"{instance_id}: no offline source for {repo} in {selection.sources.repos_dir} "
                          "(pass --source DIR, a folder of sources, or --source REPO=PATH_OR_URL; or set "
                          "$PINPOINT_OFFICIAL_IMAGES to use the official SWE-bench images)")
    return selection.instances[0]


def breadth_first(instances: list[Instance]) -> list[Instance]:
    """Every repo early, then every repo+version, then the rest: a run cut short still covers the most ground
    (one instance per repo+version first, taken round-robin over the repos)."""
    seen, first, rest = set(), [], []
    for instance in instances:
        key = (instance.repo, instance.version)
        (rest if key in seen else first).append(instance)
        seen.add(key)

    def round_robin(group: list[Instance]) -> list[Instance]:
        by_repo: dict[str, list[Instance]] = defaultdict(list)
        for instance in group:
            by_repo[instance.repo].append(instance)
        return [i for batch in zip_longest(*by_repo.values()) for i in batch if i is not None]

    return round_robin(first) + round_robin(rest)

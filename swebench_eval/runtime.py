"""The one container an instance runs in: the agent works in it and the grader grades in it, with the same limits.

`preflight` checks everything that can fail before a build (the spec, the repository source and commit, the Docker
engine), so a bad instance costs one line and no image. `instance_runtime` sizes the box from the instance's spec
and the `runtime.*` settings: offline, with private addresses that time out as on the internet (requests'
connect-timeout tests), and the spec's CPU quota (pylint's multiprocessing tests skip on one core).
"""

from __future__ import annotations

import dataclasses

from pinpoint.environments.docker_runtime import DockerRuntime
from pinpoint.environments.runtime import RuntimeSettings
from pinpoint.swebench_eval.datasets import Instance
from pinpoint.swebench_eval.images import BuildRecord, build_instance_image
from pinpoint.swebench_eval.official import box_layout, official_image
from pinpoint.swebench_eval.scripts import TESTBED
from pinpoint.swebench_eval.sources import RepoSources, SourceError
from pinpoint.swebench_eval.specs import spec_for


def preflight(instance: Instance, sources: RepoSources) -> None:
    """Raise SpecError, SourceError or EngineUnavailable (each says what to do) before anything is built."""
    from pinpoint.environments import engine

    spec_for(instance)
    if not sources.has_commit(instance.repo, instance.base_commit):
        raise SourceError(f"{instance.instance_id}: commit {instance.base_commit[:12]} of {instance.repo} is not in "
                          f"{sources.git_dir(instance.repo)}")
    engine.client()


def instance_cpus(instance: Instance, settings: RuntimeSettings) -> float:
    """The configured CPUs, else the spec's quota, else one."""
    if settings.cpus is not None:
        return settings.cpus
    return spec_for(instance).get("nano_cpus", 1_000_000_000) / 1e9


def instance_runtime(instance: Instance, image: str, settings: RuntimeSettings | None = None, *,
                     grading: bool = False) -> DockerRuntime:
    """A container of `image` (the instance's image) sized for `instance`; started on first use. The grader's
    commands run as root (without capabilities) whatever `runtime.command_user` says: the eval script reinstalls
    the package into the image's Python, as the official harness does. An official image's box starts with its
    conda env active (official.box_layout), so every command, the command server included, runs on the env's Python."""
    settings = settings or RuntimeSettings()
    box = dataclasses.replace(settings, command_user="root") if grading else settings
    return DockerRuntime(image, workdir=TESTBED, settings=box, network=False, private_addresses_hang=True,
                         cpus=instance_cpus(instance, settings), env=box_layout(image).env)


def runtime_for(instance: Instance, settings: RuntimeSettings | None = None,
                sources: RepoSources | None = None) -> tuple[DockerRuntime, BuildRecord]:
    """Check, build (or reuse) the instance image, and return its runtime with what the build cost. An official
    image needs no repository source."""
    sources = sources or RepoSources()
    if official_image(instance) is None:
        preflight(instance, sources)
    record = build_instance_image(instance, sources)
    return instance_runtime(instance, record.tag, settings), record

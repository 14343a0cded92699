"""Layered images for SWE-bench instances: base (Python) -> env (repo + version, and the install's dependencies
all of the repository's rows share, swebench_eval.shared_pins) -> reference (a checkout the instances of a calendar
quarter share, swebench_eval.reference) -> instance (the base commit's changes + install).

Each tag ends in a hash of everything the layer is built from (its parent's tag, its script, its source commit),
so a layer is rebuilt only when an input changes, and instances whose env inputs agree share one env layer.
Building goes through `environments.images` (base images, build steps with the host CA bundle, and the registry:
each layer pulled from `--registry` before it would be built, pushed there after).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pinpoint.environments.files import scratch_dir
from pinpoint.environments.images import commit_build_step, ensure_base_image, ensure_image
from pinpoint.swebench_eval.datasets import Instance
from pinpoint.swebench_eval.official import OfficialImage, box_layout, official_image
from pinpoint.swebench_eval.reference import (
    Reference,
    choose_reference,
    write_commit_delta,
    write_reference_tree,
)
from pinpoint.swebench_eval.scripts import (
    COMMIT_DELTA,
    TESTBED,
    env_script,
    instance_script,
    reference_script,
)
from pinpoint.swebench_eval.shared_pins import env_pins
from pinpoint.swebench_eval.sources import RepoSources
from pinpoint.swebench_eval.specs import env_inputs, spec_for

LABEL = "pinpoint.swebench"
ENV_REPO = "pinpoint-swe-env"
REFERENCE_REPO = "pinpoint-swe-reference"
INSTANCE_REPO = "pinpoint-swe-instance"
ENV_BUILD_TIMEOUT = 3600
INSTANCE_BUILD_TIMEOUT = 1800
#: packages go into the base Python itself (see scripts.py); Debian marks it externally managed from bookworm on
ENV_CHANGES = ["ENV PIP_BREAK_SYSTEM_PACKAGES=1"]

def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in text.lower())


@dataclass(frozen=True)
class ImagePlan:
    """The tags and scripts of one instance's layers, computed without building anything (but the base image)."""

    instance_id: str
    python_requested: str
    python_used: str
    base_tag: str
    env_tag: str
    env_script: str
    reference: Reference
    reference_tag: str
    reference_script: str
    instance_tag: str
    instance_script: str


def plan_images(instance: Instance, sources: RepoSources | None = None, specs_path: str | None = None,
                shared_deps: bool = True) -> ImagePlan:
    """Resolve the layer tags of `instance` (this builds the base image if missing: its tag names the parent).
    `shared_deps=False`: no dependency of the install in the env or reference layers (a plain env, as the official
    harness's), to compare."""
    sources = sources or RepoSources()
    spec = spec_for(instance, specs_path)
    requested = str(spec["python"])
    # without a registry, 3.10 has no base here: the nearest version stands in, and every report says so
    base = ensure_base_image(requested, allow_nearest=True)
    used = (_client().images.get(base).labels or {}).get("pinpoint.python", requested)
    inputs = env_inputs(instance, spec, sources)
    env_text = env_script(inputs, env_pins(instance.repo, spec) if shared_deps else ())
    # no version in the tag: versions whose inputs agree (e.g. all of sympy's) share one env layer
    env_tag = f"{ENV_REPO}:{_safe(instance.owner_name)}-{_digest(base, env_text)}"
    reference = choose_reference(sources, instance.repo, instance.base_commit)
    # the members name the shared objects, the commit the work tree: together the layer's whole content
    # the script names the spec's pre_install and install (the shared dependencies), so rows share it when they agree
    ref_text = reference_script(spec if shared_deps else None)
    ref_tag = (f"{REFERENCE_REPO}:{_safe(instance.owner_name)}-{reference.commit[:8]}-"
               f"{_digest(env_tag, ref_text, reference.commit, reference.members)}")
    inst_text = instance_script(instance, spec, shared_deps)
    inst_tag = (f"{INSTANCE_REPO}:{_safe(instance.instance_id)}-"
                f"{_digest(ref_tag, inst_text, instance.repo, instance.base_commit)}")
    return ImagePlan(instance.instance_id, requested, used, base, env_tag, env_text, reference, ref_tag, ref_text,
                     inst_tag, inst_text)


def _labels(kind: str, instance: Instance, reference_commit: str = "") -> dict[str, str]:
    labels = {LABEL: kind, "pinpoint.repo": instance.repo, "pinpoint.version": instance.version}
    if kind == "reference":  # shared by the quarter's rows: the version is that of the row that built it
        labels["pinpoint.reference"] = reference_commit
    if kind == "instance":
        labels["pinpoint.instance"] = instance.instance_id
    return labels


@dataclass
class BuildRecord:
    """What `build_instance_image` did: the tag, how each layer came (cached, pulled, built) and the seconds its
    build step took (0.0 when not built); or the official image used instead (`plan` None, nothing built)."""

    plan: ImagePlan | None
    env_seconds: float = 0.0
    reference_seconds: float = 0.0
    instance_seconds: float = 0.0
    env_how: str = "cached"
    reference_how: str = "cached"
    instance_how: str = "cached"
    official: OfficialImage | None = None

    @property
    def tag(self) -> str:
        return self.official.tag if self.official else self.plan.instance_tag

    @property
    def python_used(self) -> str:
        """The Python the instance's tests run on (an official image's conda env: read from the image)."""
        if self.official:
            return box_layout(self.official.tag).python
        return self.plan.python_used

    def describe(self) -> str:
        """`env 12s, reference cached, instance pulled`: each layer's build seconds, or how it came without a build."""
        if self.official:
            return f"official image {self.official.how}"
        def one(how: str, seconds: float) -> str:
            return f"{seconds:.0f}s" if how == "built" else how
        return (f"env {one(self.env_how, self.env_seconds)}, "
                f"reference {one(self.reference_how, self.reference_seconds)}, "
                f"instance {one(self.instance_how, self.instance_seconds)}")


def build_instance_image(instance: Instance, sources: RepoSources | None = None,
                         specs_path: str | None = None, shared_deps: bool = True) -> BuildRecord:
    """The instance's official image when $PINPOINT_OFFICIAL_IMAGES names where it can be had (official.py);
    else build (or reuse, or pull) the env, reference and instance layers of `instance`; raises environments'
    BuildError on failure. A synthesized row runs in the image of the row it was made from."""
    instance = instance.image_row()
    official = official_image(instance)
    if official is not None:
        return BuildRecord(None, official=official)
    sources = sources or RepoSources()
    plan = plan_images(instance, sources, specs_path, shared_deps)
    record = BuildRecord(plan)

    def build_env() -> None:
        start = time.monotonic()
        commit_build_step(plan.base_tag, plan.env_script, plan.env_tag, network=True,
                          labels=_labels("env", instance), changes=ENV_CHANGES, timeout=ENV_BUILD_TIMEOUT)
        record.env_seconds = time.monotonic() - start

    def build_reference() -> None:
        start = time.monotonic()
        with scratch_dir("pinpoint-ref-") as workdir:
            tree = write_reference_tree(sources, plan.reference, Path(workdir) / "testbed")
            # network: pip fetches the shared dependencies (as of PACKAGES_PRIOR_TO, like every install)
            commit_build_step(plan.env_tag, plan.reference_script, plan.reference_tag, network=True,
                              copy_in={str(tree): TESTBED}, timeout=INSTANCE_BUILD_TIMEOUT,
                              labels=_labels("reference", instance, plan.reference.commit))
        record.reference_seconds = time.monotonic() - start

    def build_instance() -> None:
        start = time.monotonic()
        commit_instance_layer(plan, instance, sources, plan.instance_tag)
        record.instance_seconds = time.monotonic() - start

    record.env_how = ensure_image(plan.env_tag, build_env)
    record.reference_how = ensure_image(plan.reference_tag, build_reference)
    record.instance_how = ensure_image(plan.instance_tag, build_instance)
    return record


def commit_instance_layer(plan: ImagePlan, instance: Instance, sources: RepoSources, tag: str) -> None:
    """Run the instance step on the plan's (existing) reference layer and commit it as `tag`."""
    with scratch_dir("pinpoint-instance-src-") as workdir:
        delta = write_commit_delta(sources, plan.reference, instance.base_commit, Path(workdir) / "commit")
        commit_build_step(plan.reference_tag, plan.instance_script, tag, network=True,
                          copy_in={str(delta): COMMIT_DELTA}, labels=_labels("instance", instance),
                          changes=[f"WORKDIR {TESTBED}"], timeout=INSTANCE_BUILD_TIMEOUT)


def _client():
    from pinpoint.environments import engine

    return engine.client()


def list_images() -> list[dict[str, Any]]:
    """Every env and instance image this harness built: tag, kind, repo, version, instance, total bytes."""
    rows = []
    for image in _client().images.list(filters={"label": LABEL}):
        labels = image.labels or {}
        for tag in image.tags or ["<untagged>"]:
            rows.append({"tag": tag, "kind": labels.get(LABEL), "repo": labels.get("pinpoint.repo"),
                         "version": labels.get("pinpoint.version"), "instance": labels.get("pinpoint.instance"),
                         "bytes": image.attrs.get("Size", 0)})
    return sorted(rows, key=lambda r: (r["kind"] or "", r["tag"]))


def layer_bytes(tag: str, parent_tag: str) -> int:
    """Bytes the layer `tag` adds on top of `parent_tag` (an instance over its reference: what each instance costs)."""
    client = _client()
    return client.images.get(tag).attrs["Size"] - client.images.get(parent_tag).attrs["Size"]


def instance_layer_sizes() -> dict[str, int]:
    """Bytes each built instance layer adds on top of its parent (a reference layer, or an env layer for images
    built before references), by instance tag."""
    return {row["tag"]: row["own_bytes"] for row in instance_layers()}


def instance_layers() -> list[dict[str, Any]]:
    """Every built instance layer: its tag, instance and repository, its own bytes over its parent, the parent's kind, and for a
    reference parent the reference's bytes over its env, the built instances sharing it, and the amortized bytes
    (own bytes plus the reference's bytes shared over those instances)."""
    client = _client()
    parents = {image.id: image for kind in ("env", "reference")
               for image in client.images.list(filters={"label": f"{LABEL}={kind}"})}
    rows = []
    for image in client.images.list(filters={"label": f"{LABEL}=instance"}):
        parent = parents.get(image.attrs.get("Parent", ""))
        if parent is None or not image.tags:
            continue
        kind = (parent.labels or {}).get(LABEL)
        reference = 0
        if kind == "reference":
            env = client.images.get(parent.attrs["Parent"])
            reference = parent.attrs["Size"] - env.attrs["Size"]
        labels = image.labels or {}
        rows.append({"tag": image.tags[0], "instance": labels.get("pinpoint.instance"),
                     "repo": labels.get("pinpoint.repo"), "parent": parent.id, "parent_kind": kind,
                     "own_bytes": image.attrs["Size"] - parent.attrs["Size"], "reference_bytes": reference})
    sharing: dict[str, int] = {}
    for row in rows:
        sharing[row["parent"]] = sharing.get(row["parent"], 0) + 1
    for row in rows:
        row["sharing"] = sharing[row["parent"]] if row["parent_kind"] == "reference" else 0
        row["amortized_bytes"] = row["own_bytes"] + (row["reference_bytes"] / row["sharing"] if row["sharing"] else 0)
    return sorted(rows, key=lambda r: r["tag"])


@dataclass(frozen=True)
class LayerMeans:
    """One repository's built instance layers, mean bytes each: `own` over its parent (the reference), `over_env`
    over its env image (the reference's bytes counted whole in every instance), `amortized` (the reference's bytes
    shared over the built instances on it: total bytes above the env layers per instance)."""

    repo: str
    instances: int
    own: float
    over_env: float
    amortized: float


def layer_means(rows: list[dict[str, Any]]) -> list[LayerMeans]:
    """Per repository, from `instance_layers()` rows."""
    by_repo: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_repo.setdefault(row["repo"] or "?", []).append(row)

    def mean(group: list[dict[str, Any]], key) -> float:
        return sum(map(key, group)) / len(group)

    return [LayerMeans(repo, len(group), mean(group, lambda r: r["own_bytes"]),
                       mean(group, lambda r: r["own_bytes"] + r["reference_bytes"]),
                       mean(group, lambda r: r["amortized_bytes"]))
            for repo, group in sorted(by_repo.items())]


def top_layer_files(tag: str) -> dict[str, int]:
    """Bytes of each regular file in the top layer of `tag` (an instance layer: what that instance adds), by path.

    Read from `docker save` (seconds for a few hundred MB); `docker history` gives only the layer's total."""
    import io
    import tarfile

    saved = io.BytesIO()
    for chunk in _client().images.get(tag).save(named=False):
        saved.write(chunk)
    saved.seek(0)
    with tarfile.open(fileobj=saved) as outer:
        manifest = json.load(outer.extractfile("manifest.json"))
        top = outer.extractfile(manifest[0]["Layers"][-1])
        with tarfile.open(fileobj=top) as layer:
            return {m.name: m.size for m in layer.getmembers() if m.isfile()}


def prune_images(kinds: tuple[str, ...] = ("instance",), keep: set[str] | None = None) -> list[str]:
    """Remove this harness's images of the given kinds, except tags in `keep`; returns the removed tags."""
    client = _client()
    removed = []
    for row in list_images():
        if row["kind"] in kinds and row["tag"] not in (keep or set()):
            try:
                client.images.remove(row["tag"], noprune=False)
                removed.append(row["tag"])
            except Exception as exc:  # an image still used by a container: say so, keep going
                print(f"pinpoint: kept {row['tag']}: {exc}")
    return removed

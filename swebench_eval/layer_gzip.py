"""What a registry stores of each layer: the layer's tar gzip-compressed, as `docker push` sends it.

The engine keeps layers uncompressed (Docker's image `Size`, what `images list --layers` reports first); a registry
keeps and serves them gzipped, which is what a pull downloads and what published figures for SWE-bench image sets
count. Each layer is read from `docker save` (the same tar a push compresses) and gzipped at level 6 (Go's default,
which `docker push` uses); a layer shared by several images is compressed once, and each figure is kept under the
cache folder by diff id (the hash of the layer's content), so a second listing reads no image again.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pinpoint.environments.engine import client as _client
from pinpoint.environments.files import write_json_atomic
from pinpoint.environments.paths import cache_dir
from pinpoint.swebench_eval.images import layer_means

#: Go's compress/gzip default, the level `docker push` compresses with
GZIP_LEVEL = 6


class _ChunkStream(io.RawIOBase):
    """A readable stream over an iterator of byte chunks (the engine's `docker save` answer)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._left = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._left:
            self._left = next(self._chunks, b"")
            if not self._left:
                return 0
        size = min(len(buffer), len(self._left))
        buffer[:size] = self._left[:size]
        self._left = self._left[size:]
        return size


def diff_ids(tag_or_id: str) -> list[str]:
    """The image's layers, bottom first, by diff id (the sha256 of each layer's uncompressed tar)."""
    return list(_client().images.get(tag_or_id).attrs["RootFS"]["Layers"])


def own_layers(image: str, parent: str) -> list[str]:
    """The diff ids of the layers `image` adds over `parent` (its layers past the parent's)."""
    return diff_ids(image)[len(diff_ids(parent)):]


def gzip_bytes(tag: str, wanted: set[str]) -> dict[str, int]:
    """Gzipped bytes of the layers of `tag` whose diff id is in `wanted`, by diff id; one `docker save` of `tag`
    (every layer is read and hashed; only the wanted ones are compressed)."""
    found: dict[str, int] = {}
    stream = io.BufferedReader(_ChunkStream(_client().images.get(tag).save(named=False)), 1 << 20)
    with tarfile.open(fileobj=stream, mode="r|") as saved:
        for member in saved:
            # docker 20-24 name layers <id>/layer.tar, docker 25+ (OCI layout) blobs/sha256/<digest>
            if not member.isfile() or member.name.endswith((".json", "repositories", "oci-layout")):
                continue
            data = saved.extractfile(member).read()
            diff_id = "sha256:" + hashlib.sha256(data).hexdigest()
            if diff_id in wanted:
                found[diff_id] = len(gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0))
    return found


@dataclass(frozen=True)
class GzipMeans:
    """One repository's built instance images, gzipped MB as a registry stores them, mean per instance: `own`
    (the instance layer), `over_env` (instance + its reference, what pulling one instance over its env costs),
    `amortized` (the reference shared over the built instances on it) and `with_env` (amortized plus the env
    layers shared over the repository's built instances: every byte above the base image, per instance)."""

    repo: str
    instances: int
    own: float
    over_env: float
    amortized: float
    with_env: float


def _known_sizes() -> Path:
    return cache_dir() / "layer-gzip-bytes.json"


def gzip_means(rows: list[dict[str, Any]]) -> list[GzipMeans]:
    """Per repository, from `images.instance_layers()` rows (each instance's tag and parent); saves an instance
    image only when one of its layers was never measured."""
    client = _client()
    known = _known_sizes()
    sizes: dict[str, int] = json.loads(known.read_text()) if known.exists() else {}
    measured = len(sizes)
    gzipped = []  # instance_layers() rows with gzipped bytes, for images.layer_means
    env_of: dict[str, list[str]] = {}  # env image ids by repository
    env_bytes: dict[str, int] = {}
    for row in rows:
        parent = client.images.get(row["parent"])
        env_id = parent.attrs["Parent"] if row["parent_kind"] == "reference" else parent.id
        base_id = client.images.get(env_id).attrs.get("Parent", "")
        own = own_layers(row["tag"], parent.id)
        reference = own_layers(parent.id, env_id) if row["parent_kind"] == "reference" else []
        env = own_layers(env_id, base_id) if base_id else diff_ids(env_id)
        missing = {d for d in own + reference + env if d not in sizes}
        if missing:
            sizes.update(gzip_bytes(row["tag"], missing))
        env_bytes[env_id] = sum(sizes[d] for d in env)
        env_of.setdefault(row["repo"] or "?", []).append(env_id)
        own_bytes, reference_bytes = sum(sizes[d] for d in own), sum(sizes[d] for d in reference)
        shared = reference_bytes / row["sharing"] if row["sharing"] else 0
        gzipped.append({**row, "own_bytes": own_bytes, "reference_bytes": reference_bytes,
                        "amortized_bytes": own_bytes + shared})
    if len(sizes) > measured:
        write_json_atomic(known, sizes)
    return [GzipMeans(m.repo, m.instances, m.own, m.over_env, m.amortized,
                      m.amortized + sum(env_bytes[e] for e in set(env_of[m.repo])) / m.instances)
            for m in layer_means(gzipped)]

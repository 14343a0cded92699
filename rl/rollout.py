"""`pinpoint rl rollout`: episodes on the shared executor, streamed into a dataset file that resumes after a kill.

`environments/executor.py` runs `workers` EpisodeWorkers, in this process (`--backend local`, the default) or as
Ray actors (`--backend ray`, `--address` for a cluster; each actor holds `containers_per_worker` units of its
node's `docker` resource and drives that node's engine), each with its own warm pool and `concurrency` episodes at
once on threads (one `RepairEnv` per thread, the pool shared). The G samples of a task (a GRPO group) go to the
same worker, so they share its image and pool. The driver is the only
writer: each finished episode is appended to `<out>` as one JSON line and flushed, so a kill loses at most the
episodes in flight; a rerun skips every (task, sample) already written with a reward or a model outcome, and
retries infrastructure failures (the later row of a key wins). `-o *.parquet` streams to `<output>.jsonl` and writes
the Parquet file when the run ends.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pinpoint.agent.llm_config import LLMConfig
from pinpoint.environments.errors import UsageError
from pinpoint.environments.executor import Item, Needs, executor_for
from pinpoint.environments.files import json_objects, last_per_key
from pinpoint.environments.labels import RUN_ID, RUN_ID_ENV
from pinpoint.environments.runtime import RuntimeSettings
from pinpoint.rl.env import EnvSettings, InfraFailure, RepairEnv
from pinpoint.rl.health import SERVER_WAIT_S, wait_for_server
from pinpoint.rl.tasks import RlTask, task_from

FAILURE_POLICIES = ("retry", "mask", "raise")


@dataclass(frozen=True)
class RetryPolicy:
    """How a worker treats an episode that ended in an infrastructure failure (RolloutSpec's fields)."""

    on_failure: str = "retry"
    retries: int = 3
    retry_wait_s: float = 5.0
    server_wait_s: float = SERVER_WAIT_S

    @property
    def tries(self) -> int:
        return self.retries if self.on_failure == "retry" else 1


@dataclass
class RolloutSpec:
    """What to roll out, with which policy, how wide, and where the rows go."""

    tasks: list[RlTask]
    policy: str
    out: Path
    samples_per_task: int = 1
    workers: int = 1
    concurrency: int = 1
    address: str | None = None
    #: where the workers run: `local` (this process, threads) or `ray` (actors on the cluster at `address`)
    executor: str = "local"
    settings: EnvSettings = field(default_factory=EnvSettings)
    llm: LLMConfig | None = None
    #: containers one worker may keep alive (its pool's bound); the engine sees at most workers × this
    containers_per_worker: int = 4
    #: how the recording gateway speaks to the model server (`llamacpp`, `vllm`), or `openai`: no gateway, the
    #: policy calls the server directly and the rows have no token ids
    backend: str = "llamacpp"
    #: the run's sampling seed: each turn's seed is a hash of (seed, task, sample, turn) (None: the server's own)
    seed: int | None = None
    #: a local Hugging Face tokenizer of the served model: SGLang's chat template (it has no template endpoint),
    #: or `openai` calls recorded retokenized (the tokenizer's ids, not the server's)
    tokenizer: str | None = None
    #: an episode that ends in an infrastructure failure: `retry` (the default: up to `retries` tries in all, each
    #: on a fresh box, `retry_wait_s` apart and doubling, then masked), `mask` (its row says so: `masked`, reward
    #: None, loss mask 0; a rerun retries it) or `raise` (the run stops at the first one)
    on_failure: str = "retry"
    retries: int = 3
    retry_wait_s: float = 5.0
    #: before trying again an episode the model server ended, wait up to this long for the server's health
    server_wait_s: float = SERVER_WAIT_S

    def __post_init__(self) -> None:
        if self.on_failure not in FAILURE_POLICIES or self.retries < 1 or min(self.retry_wait_s,
                                                                             self.server_wait_s) < 0:
            raise ValueError("rollout: on_failure is retry, mask or raise, retries >= 1, retry_wait_s and "
                             "server_wait_s >= 0")


def stream_path(out: Path) -> Path:
    """The JSONL file rows are appended to (the Parquet output is written from it at the end)."""
    return out.with_name(out.name + ".jsonl") if out.suffix == ".parquet" else out


#: the columns the Parquet output stores as JSON text (nested, of varying shape)
JSON_COLUMNS = ("reward_info", "messages")


def read_dataset(path: Path) -> list[dict[str, Any]]:
    """A rollout dataset as written (JSONL, or Parquet whose JSON_COLUMNS stay JSON text), the last row per (task,
    sample) (a rerun appends a retried episode again); a line cut by a kill, or one that is not an object, is
    skipped, and a row without a task id is kept as it is."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = [r for r in pq.read_table(path).to_pylist() if isinstance(r, dict)]
    else:
        rows = json_objects(path)
    return last_per_key(rows, lambda index, row: (str(row.get("task_id")), str(row.get("sample")))
                        if "task_id" in row else index)


def read_rows(out: Path) -> list[dict[str, Any]]:
    """The rows written so far to a rollout's stream, the last per (task, sample)."""
    path = stream_path(out)
    rows = read_dataset(path) if path.exists() else []
    return [row for row in rows if "task_id" in row and "sample" in row]


def pending(spec: RolloutSpec) -> list[tuple[RlTask, int]]:
    """(task, sample) pairs without a finished row: never run, or ended by an infrastructure failure."""
    done = {(r["task_id"], r["sample"]) for r in read_rows(spec.out) if r.get("status") != "infra_failure"}
    return [(task, s) for task in spec.tasks for s in range(spec.samples_per_task) if (task.task_id, s) not in done]


class EpisodeWorker:
    """A Ray actor: a warm pool and one env per thread; `run` plays one episode and returns its row."""

    def __init__(self, settings: dict, policy: str, llm: dict | None, containers: int, backend: str = "llamacpp",
                 seed: int | None = None, tokenizer: str | None = None,
                 retry: dict | None = None) -> None:
        from pinpoint.rl.gateway import RecordingGateway
        from pinpoint.rl.pool import WarmPool

        settings = dict(settings)
        runtime = RuntimeSettings(**settings.pop("runtime"))
        self.settings = EnvSettings(**settings, runtime=runtime)
        self.policy, self.seed = policy, seed
        self.retry = RetryPolicy(**(retry or {}))
        self.llm = LLMConfig(**llm) if llm else None
        self.backend = backend if self.llm else "scripted"
        self.pool = WarmPool(idle_per_key=1, max_containers=containers)
        recorded = self.llm is not None and (backend != "openai" or tokenizer is not None)
        self.gateway = (RecordingGateway(self.llm.base_url, backend=backend, tokenizer=tokenizer).start()
                        if recorded else None)
        self.token_source = token_source(self.backend, tokenizer)
        self._local = threading.local()

    def run(self, task_row: dict, sample: int) -> dict[str, Any]:
        """One episode under the failure policy; the row's `wall_s` spans every try and wait, `tries_s` holds each
        try's own time and `server_wait_s` the time spent waiting for the model server to come back."""
        from pinpoint.rl.episodes import POLICY_FAILURE, run_episode
        from pinpoint.rl.gateway import SeedKey

        if not hasattr(self._local, "env"):
            self._local.env = RepairEnv(self.settings, pool=self.pool)
        task, failures, tries_s, waited = task_from(task_row), [], [], 0.0
        seed = None if self.seed is None else SeedKey(self.seed, task.task_id, sample)
        started = time.monotonic()
        for tried in range(1, self.retry.tries + 1):
            row = run_episode(self._local.env, task, self.policy, sample, llm=self.llm, gateway=self.gateway,
                              seed=seed)
            tries_s.append(round(row["wall_s"], 3))
            if row["status"] != "infra_failure":
                break
            reason = str((row.get("reward_info") or {}).get("reason", ""))
            failures.append(reason[:300])
            if tried < self.retry.tries:  # the next reset() after an infrastructure failure starts a fresh box
                time.sleep(self.retry.retry_wait_s * 2 ** (tried - 1))
                if reason.startswith(POLICY_FAILURE) and self.llm is not None:  # e.g. a model server restarting
                    waited += wait_for_server(self.llm.base_url, self.retry.server_wait_s)
        masked = row["status"] == "infra_failure"
        if masked:
            row["response_mask"] = [0] * len(row.get("response_mask") or [])
        return {**row, "backend": self.backend, "token_source": self.token_source, "tries": tried,
                "masked": masked, "failures": failures, "tries_s": tries_s, "server_wait_s": round(waited, 3),
                "wall_s": time.monotonic() - started}

    def stats(self) -> dict[str, Any]:
        return asdict(self.pool.stats)

    def close(self) -> None:
        """Remove the pool's boxes and stop the gateway: the executor calls it when the rollout ends."""
        self.pool.close()
        if self.gateway is not None:
            self.gateway.stop()


def run_rollout(spec: RolloutSpec, on_row: Callable[[dict], None] | None = None) -> list[dict[str, Any]]:
    """Run every pending episode on the executor `spec.executor` names and append each row to the dataset as it
    finishes (this process the only writer, fsync per row); returns all rows."""
    todo = pending(spec)
    if todo:
        os.environ[RUN_ID_ENV] = RUN_ID  # forwarded to Ray workers: their boxes carry this run's label
        keys = {f"{task.task_id}#{sample}": (task.task_id, sample) for task, sample in todo}
        items = [Item(f"{task.task_id}#{sample}", (task.to_row(), sample), group=task.task_id)
                 for task, sample in todo]
        path = stream_path(spec.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        env_names = [spec.llm.api_key_env] if spec.llm and getattr(spec.llm, "api_key_env", None) else []
        with executor_for(spec.executor, spec.address, spec.workers, env_names=env_names,
                          docker_slots=spec.workers * spec.containers_per_worker) as ex, path.open("a") as sink:
            outcomes = ex.run_on_workers(EpisodeWorker, _worker_init(spec), items, workers=spec.workers,
                                         concurrency=spec.concurrency, needs=Needs(0, spec.containers_per_worker))
            for outcome in outcomes:
                row = outcome.value if outcome.error is None else _failure_row(*keys[outcome.key], outcome.error)
                _stop_if_told(row, spec.on_failure)
                sink.write(json.dumps(row) + "\n")
                sink.flush()
                os.fsync(sink.fileno())
                if on_row is not None:
                    on_row(row)
    rows = read_rows(spec.out)
    if spec.out.suffix == ".parquet":
        _write_parquet(rows, spec.out)
    return rows


def _worker_init(spec: RolloutSpec) -> tuple[Any, ...]:
    """EpisodeWorker's arguments: plain data, so a Ray actor on any node gets the same."""
    llm = asdict(spec.llm) if spec.llm else None
    retry = RetryPolicy(spec.on_failure, spec.retries, spec.retry_wait_s, spec.server_wait_s)
    return (asdict(spec.settings), spec.policy, llm, spec.containers_per_worker, spec.backend, spec.seed,
            spec.tokenizer, asdict(retry))


def _stop_if_told(row: dict[str, Any], on_failure: str) -> None:
    """A usage error stops the run at once (every other episode would meet it too), and so does an
    infrastructure failure under `raise`; neither row is written, so a rerun runs the episode again."""
    reason = str((row.get("reward_info") or {}).get("reason", "no reason given")).splitlines()[0][:300]
    if row.get("status") == "usage_error":
        raise UsageError(f"the model server refused the request ({reason}); check --policy, --model and the key")
    if row.get("status") == "infra_failure" and on_failure == "raise":
        raise InfraFailure(f"{row.get('task_id')} sample {row.get('sample')}: {reason} (--on-failure raise)")


def token_source(backend: str, tokenizer: str | None) -> str:
    """Where a row's token ids come from: `server` (the ids the model sampled: llama.cpp, vLLM, SGLang),
    `retokenized` (an OpenAI-compatible server's text, tokenized by `tokenizer`), or `none`."""
    if backend == "scripted" or (backend == "openai" and tokenizer is None):
        return "none"
    return "retokenized" if backend == "openai" else "server"


def _failure_row(task_id: str, sample: int, error: BaseException) -> dict[str, Any]:
    """The row of an episode whose worker failed under it: an infrastructure failure, retried by a rerun."""
    reason = str(error).splitlines()[0][:300] if str(error) else type(error).__name__
    return {"task_id": task_id, "sample": sample, "status": "infra_failure", "reward": None, "masked": True,
            "reward_info": {"reason": f"worker failed: {reason}"}}


def _token_types() -> dict[str, Any]:
    import pyarrow as pa

    return {"prompt_ids": pa.int64, "response_ids": pa.int64, "response_mask": pa.int64,
            "rollout_logprobs": pa.float64, "step_rewards": pa.float64, "failures": pa.string}


#: a row with every field an episode writes, typed: the schema of a file with no rows from which to take one
_SCHEMA_ROW: dict[str, Any] = {
    "task_id": "", "sample": 0, "policy": "", "reward_kind": "", "steps": 0, "step_rewards": [0.0], "patch": "",
    "messages": [], "llm_s": 0.0, "env_s": 0.0, "decoding": "", "reward": 0.0, "reward_info": {}, "status": "",
    "prompt_ids": [0], "response_ids": [0], "response_mask": [0], "rollout_logprobs": [0.0], "segments": 0,
    "wall_s": 0.0, "backend": "", "token_source": "", "tries": 0, "masked": False, "failures": [""],
    "tries_s": [0.0], "server_wait_s": 0.0}


def _write_parquet(rows: list[dict[str, Any]], out: Path, like: list[dict[str, Any]] | None = None) -> None:
    """Write `rows` as Parquet, atomically. With no rows, the file still holds the full schema: that of `like`
    (the rows they were chosen from), else every field an episode writes; a file of 0 columns does not load."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = rows or like or [_SCHEMA_ROW]
    columns = [{**row, **{name: json.dumps(row.get(name)) for name in JSON_COLUMNS},
                "step_rewards": [r if r is not None else float("nan") for r in row.get("step_rewards", [])]}
               for row in source]
    table = pa.Table.from_pylist(columns).slice(0, len(rows))
    for name, kind in _token_types().items():  # one schema whatever the policy (a scripted one has empty lists)
        if name in table.column_names:
            table = table.set_column(table.column_names.index(name), name, table[name].cast(pa.list_(kind())))
    tmp = out.with_name(out.name + ".tmp")
    with pq.ParquetWriter(tmp, table.schema) as writer:
        if table.num_rows:  # no row group at all when empty: readers take a 0-row group's size as a batch size
            writer.write_table(table)
    tmp.replace(out)

"""A discrete-event simulation of `pinpoint eval` on a cluster: N instances x S samples graded on nodes of C cores.

Fed by pinpoint_lab/scale_costs.json (per-instance seconds and MB measured here by pinpoint_lab/measure_scale.py, plus the
documented all-repository figures). What it models, each from the code's real behaviour (lab/scale.md):

- each sample is one task holding one `docker` slot and one CPU on its node for all of its phases;
- a task first needs its env image, then its instance image, on its node's engine: present, built on this node
  now (another task there waits for it: the per-tag file lock), or, with a registry, pulled once pushed;
- every build step and every grading creates one container; each node's engine creates them one at a time at its
  measured rate (a FIFO server), so a busy engine queues them;
- the driver writes one fsynced row per task, one at a time, at its measured rate;
- dispatch: `spread` (the next task goes to any free slot, as Ray places tasks: an instance's samples land on
  different nodes) or `grouped` (an instance's samples all go to one node, the least loaded, as rollout groups).

    .venv/bin/python -m pinpoint_lab.simulate_scale --nodes 4 16 64          # the lab/scale.md table
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

COSTS = Path(__file__).with_name("scale_costs.json")


@dataclass(frozen=True)
class Instance:
    """One instance's costs: its env group, build seconds, layer MB and one grading's seconds."""

    env: int
    env_build_s: float
    env_mb: float
    build_s: float
    layer_mb: float
    grade_s: float


@dataclass(frozen=True)
class Cluster:
    """The machines and the rates that bound them (defaults: measured here, lab/scale.md)."""

    nodes: int
    slots: int = 16                   # `docker` slots per node: boxes its engine holds (one CPU each)
    creates_per_s: float = 3.24       # per engine, saturated
    rows_per_s: float = 3287.0        # the driver's fsynced appends
    pull_mb_per_s: float = 54.0       # per node, from the registry
    registry_mb_per_s: float = 1250.0 # the registry's egress, all nodes together (10 Gb/s: assumed)
    base_mb: float = 252.0            # the base image every node holds before the run
    registry: str = "none"            # "push-pull": pull when pushed, else build; "build-once": one builder
    policy: str = "spread"            # or "grouped"
    longest_first: bool = False       # submit instances by their expected grading seconds, longest first


@dataclass
class Result:
    """What a planner reads off one simulated run."""

    wall_s: float
    finished: int
    build_share: float                # slot-seconds building, pulling or waiting for an image / all busy ones
    peak_disk_mb: float               # the fullest node: base + every layer it holds
    disk_bound_mb: float              # base + every env and instance layer the workload has
    env_builds: int
    instance_builds: int
    pulls: int
    engine_busy: float                # the busiest engine's create time / wall
    driver_busy: float                # the driver's write time / wall
    slot_busy: float                  # busy slot-seconds / (slots x nodes x wall)


@dataclass
class _Node:
    images: dict[tuple[str, int], float] = field(default_factory=dict)  # image -> time it is ready here
    engine_free: float = 0.0
    engine_busy: float = 0.0
    queue: list[tuple[int, int]] = field(default_factory=list)         # grouped: its own tasks
    disk_mb: float = 0.0


class _Run:
    """One simulated run: an event heap of (time, seq, action)."""

    def __init__(self, instances: list[Instance], samples: int, cluster: Cluster) -> None:
        self.instances, self.cluster = instances, cluster
        self.nodes = [_Node(disk_mb=cluster.base_mb) for _ in range(cluster.nodes)]
        # sample-major: the first pass starts every instance once, so different images build side by side
        order = range(len(instances))
        if cluster.longest_first:
            order = sorted(order, key=lambda i: -instances[i].grade_s)
        self.tasks = [(i, s) for s in range(samples) for i in order]
        self.next_task = 0
        self.registry: dict[tuple[str, int], float] = {}   # image -> time its push completed
        self.registry_free = 0.0
        self.events: list[tuple[float, int, Callable[[], None]]] = []
        self.seq = itertools.count()
        self.now = self.driver_free = self.driver_busy = self.busy = self.building = 0.0
        self.counts = {"env": 0, "instance": 0, "pull": 0}
        self.finished = 0
        if cluster.policy == "grouped":
            self._assign_groups(samples)

    def _assign_groups(self, samples: int) -> None:
        """Each instance's samples to the node with the least grading work assigned so far."""
        load = [(0.0, n) for n in range(self.cluster.nodes)]
        owner = {}
        for i, _ in self.tasks[:len(self.instances)]:
            inst = self.instances[i]
            work, owner[i] = heapq.heappop(load)
            heapq.heappush(load, (work + samples * inst.grade_s, owner[i]))
        for i, s in self.tasks:
            self.nodes[owner[i]].queue.append((i, s))

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self.events, (when, next(self.seq), action))

    def run(self) -> None:
        for _slot, n in itertools.product(range(self.cluster.slots), range(self.cluster.nodes)):
            self.at(0.0, lambda n=n: self.take(n))
        while self.events:
            self.now, _, action = heapq.heappop(self.events)
            action()

    def take(self, n: int) -> None:
        """A free slot on node `n` takes its next task (or stays idle: nothing left for it)."""
        node = self.nodes[n]
        if self.cluster.policy == "grouped":
            if not node.queue:
                return
            task = node.queue.pop(0)
        else:
            if self.next_task == len(self.tasks):
                return
            task, self.next_task = self.tasks[self.next_task], self.next_task + 1
        self.start(n, task, self.now)

    def create(self, node: _Node, seconds: float) -> float:
        """When a step that starts with a container create (queued on the engine) and runs `seconds` ends."""
        begin = max(self.now, node.engine_free)
        node.engine_free = begin + 1.0 / self.cluster.creates_per_s
        node.engine_busy += 1.0 / self.cluster.creates_per_s
        return max(begin + seconds, node.engine_free)  # `seconds` holds an uncontended create

    def image(self, n: int, key: tuple[str, int], build_s: float, mb: float) -> float:
        """When image `key` is ready on node `n`: present, being built here, pulled, or built now."""
        node = self.nodes[n]
        if key not in node.images:
            pushed = self.registry.get(key)
            once = self.cluster.registry == "build-once" and pushed is not None
            if once or (self.cluster.registry == "push-pull" and pushed is not None and pushed <= self.now):
                node.images[key], kind = self.pull(max(self.now, pushed), mb), "pull"
            else:
                node.images[key], kind = self.create(node, build_s), key[0]
                if self.cluster.registry != "none" and pushed is None:
                    self.registry[key] = node.images[key] + mb / self.cluster.pull_mb_per_s  # pushed after it
            self.counts[kind] += 1
            node.disk_mb += mb
        return max(self.now, node.images[key])

    def pull(self, start: float, mb: float) -> float:
        """When a pull begun at `start` ends: the registry serves pulls one after another at its egress rate,
        each node takes them at its own rate."""
        begin = max(start, self.registry_free)
        self.registry_free = begin + mb / self.cluster.registry_mb_per_s
        return max(self.registry_free, begin + mb / self.cluster.pull_mb_per_s)

    def start(self, n: int, task: tuple[int, int], began: float) -> None:
        inst = self.instances[task[0]]
        ready = self.image(n, ("env", inst.env), inst.env_build_s, inst.env_mb)
        self.at(ready, lambda: self.after_env(n, task, began))

    def after_env(self, n: int, task: tuple[int, int], began: float) -> None:
        inst = self.instances[task[0]]
        ready = self.image(n, ("instance", task[0]), inst.build_s, inst.layer_mb)
        self.at(ready, lambda: self.grade(n, task, began))

    def grade(self, n: int, task: tuple[int, int], began: float) -> None:
        self.building += self.now - began
        done = self.create(self.nodes[n], self.instances[task[0]].grade_s)
        self.at(done, lambda: self.done(n, began))

    def done(self, n: int, began: float) -> None:
        """The slot is free again; the driver appends the row (one fsync at a time)."""
        self.busy += self.now - began
        begin = max(self.now, self.driver_free)
        self.driver_free = begin + 1.0 / self.cluster.rows_per_s
        self.driver_busy += 1.0 / self.cluster.rows_per_s
        self.finished += 1
        self.take(n)

    def result(self, disk_bound_mb: float) -> Result:
        wall = max(self.driver_free, self.now)
        c = self.cluster
        return Result(
            wall_s=wall, finished=self.finished, build_share=self.building / self.busy if self.busy else 0.0,
            peak_disk_mb=max(node.disk_mb for node in self.nodes), disk_bound_mb=disk_bound_mb,
            env_builds=self.counts["env"], instance_builds=self.counts["instance"], pulls=self.counts["pull"],
            engine_busy=max(node.engine_busy for node in self.nodes) / wall, driver_busy=self.driver_busy / wall,
            slot_busy=self.busy / (c.slots * c.nodes * wall))


def simulate(instances: list[Instance], samples: int, cluster: Cluster) -> Result:
    """Grade `samples` patches of every instance on `cluster`; every figure of the lab/scale.md table."""
    run = _Run(instances, samples, cluster)
    run.run()
    envs = {inst.env: inst.env_mb for inst in instances}
    return run.result(cluster.base_mb + sum(envs.values()) + sum(inst.layer_mb for inst in instances))


def lognormal(rng: random.Random, median: float, mean: float) -> float:
    """A draw with this median and mean (a long right tail, as test times have)."""
    sigma = math.sqrt(2 * math.log(mean / median))
    return rng.lognormvariate(math.log(median), sigma)


def workload(costs: dict, count: int, mix: str, seed: int = 0) -> list[Instance]:
    """`count` instances in the env groups of the dataset (scaled to `count`), costs cycled over the measured
    rows (`measured`), or with the grading seconds and layer MB of all repositories (`all-repos`, docs/harness.md:
    its long tail is the slowest rows)."""
    rows, doc = costs["measured"]["rows"], costs["documented"]
    sizes = costs["workload"]["env_group_sizes"]
    groups = list(itertools.chain.from_iterable([g] * size for g, size in enumerate(sizes)))
    rng = random.Random(seed)
    out = []
    for i in range(count):
        env = groups[i * len(groups) // count]
        row, env_row = rows[i % len(rows)], rows[env % len(rows)]
        grade_s, layer_mb = row["grade_s"], row["instance_layer_mb"]
        if mix == "all-repos":
            grade_s = lognormal(rng, doc["grade_s_mix"]["median"], doc["grade_s_mix"]["mean"])
            layer_mb = lognormal(rng, doc["instance_layer_mb_mix"]["median"], doc["instance_layer_mb_mix"]["mean"])
        out.append(Instance(env, env_row["env_build_s"], env_row["env_layer_mb"], row["instance_build_s"],
                            layer_mb, grade_s))
    return out


def cluster_from(costs: dict, nodes: int, **overrides) -> Cluster:
    """A cluster with the rates measured here (the saturated engine create rate, the driver's fsync rate)."""
    measured = costs["measured"]
    rates = {"creates_per_s": max(measured["engine_boots_per_s"].values()),
             "rows_per_s": measured["driver_rows_per_s"],
             "pull_mb_per_s": costs["documented"]["pull_mb_per_s"]["value"],
             "base_mb": min(row["base_mb"] for row in measured["rows"])}
    return Cluster(nodes=nodes, **{**rates, **overrides})


def table(costs: dict, node_counts: list[int], count: int, samples: int, **given) -> Iterator[str]:
    """The markdown rows of lab/scale.md."""
    yield ("| mix | dispatch | registry | nodes | wall | build share | peak disk/node | env builds | "
           "instance builds | pulls | busiest engine | driver | slots busy |")
    yield "|" + "---|" * 13
    designs = itertools.product(("measured", "all-repos"), ("spread", "grouped"), ("none", "push-pull", "build-once"))
    for mix, policy, registry in designs:
        instances = workload(costs, count, mix)
        for nodes in node_counts:
            r = simulate(instances, samples, cluster_from(costs, nodes, policy=policy, registry=registry, **given))
            yield (f"| {mix} | {policy} | {registry} | {nodes} | {r.wall_s:,.0f} s | "
                   f"{r.build_share:.0%} | {r.peak_disk_mb / 1e3:.1f} GB | {r.env_builds} | {r.instance_builds} | "
                   f"{r.pulls} | {r.engine_busy:.0%} | {r.driver_busy:.1%} | {r.slot_busy:.0%} |")


def scaling(costs: dict, count: int, samples: int, **design) -> Iterator[str]:
    """Wall time as the cluster doubles, for one design: where a doubling stops paying."""
    yield "| mix | nodes | wall | speed-up of this doubling | busiest engine | slots busy |"
    yield "|" + "---|" * 6
    for mix in ("measured", "all-repos"):
        instances, last = workload(costs, count, mix), None
        for nodes in (1, 2, 4, 8, 16, 32, 64, 128, 256):
            r = simulate(instances, samples, cluster_from(costs, nodes, **design))
            gain = f"{last / r.wall_s:.2f}x" if last else ""
            yield (f"| {mix} | {nodes} | {r.wall_s:,.0f} s | {gain} | {r.engine_busy:.0%} | {r.slot_busy:.0%} |")
            last = r.wall_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--costs", type=Path, default=COSTS)
    parser.add_argument("--nodes", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--instances", type=int, default=500)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--slots", type=int, default=16, help="docker slots (one CPU each) per node")
    parser.add_argument("--scaling", choices=["spread", "grouped"], help="instead: wall time as the nodes double, "
                        "for this dispatch with a push-pull registry")
    parser.add_argument("--longest-first", action="store_true")
    parser.add_argument("--creates-per-s", type=float, help="engine create rate per node (default: measured)")
    args = parser.parse_args()
    costs = json.loads(args.costs.read_text())
    given = {"slots": args.slots, "longest_first": args.longest_first}
    if args.creates_per_s:
        given["creates_per_s"] = args.creates_per_s
    lines = (scaling(costs, args.instances, args.samples, policy=args.scaling, registry="push-pull", **given)
             if args.scaling else table(costs, args.nodes, args.instances, args.samples, **given))
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()

"""Per-episode token records: what a policy model was fed and what it generated, token by token.

Trainers (verl, SkyRL) train on one sequence per sample: `prompt_ids` (the first prompt) followed by `response_ids`
(every generated token and every observation token after it, in the order the model saw them), with
`response_mask` 1 on generated tokens and 0 on observation tokens, and `rollout_logprobs` aligned with
`response_ids` (the server's log-probability on generated tokens, 0.0 on observation tokens, as both trainers pad).
Re-tokenizing the chat history afterwards gives other ids than the model produced and breaks PPO, so the record is
built while generating: `EpisodeRecorder` is the one place that appends to it (the gateway and the verl loop share
it).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


def generated_only(logprobs: list[float], mask: list[int]) -> list[float]:
    """The entries of `logprobs` where `mask` is 1 (the generated tokens')."""
    return [lp for lp, m in zip(logprobs, mask, strict=True) if m]


@dataclass
class TokenSegment:
    """One valid training sample: a prompt and everything after it that the model saw or generated.

    A new segment starts when the history a client sends no longer extends what the model saw (a client rewrote or
    dropped earlier messages), so each segment's ids are exactly one context the model was fed.
    """

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    rollout_logprobs: list[float] = field(default_factory=list)
    calls: int = 0

    @property
    def context_ids(self) -> list[int]:
        """What the model has seen so far in this segment: the prompt for its next call."""
        return self.prompt_ids + self.response_ids

    @property
    def generated_logprobs(self) -> list[float]:
        """The log-probabilities of the generated tokens only (one per 1 in the mask)."""
        return generated_only(self.rollout_logprobs, self.response_mask)

    def copy(self) -> TokenSegment:
        return TokenSegment(list(self.prompt_ids), list(self.response_ids), list(self.response_mask),
                            list(self.rollout_logprobs), self.calls)


@dataclass
class EpisodeTokens:
    """An episode's tokens. The top-level `prompt_ids` … `rollout_logprobs` are those of the LAST segment (the only
    one unless a client rewrote its history); `segments` holds all of them, oldest first, each a valid sample.
    `rollout_logprobs` is aligned with `response_ids` (0.0 where the mask is 0); `generated_logprobs` has only the
    generated tokens'. `llm_s` is time spent waiting on the model server, `calls` the model calls over all segments.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    rollout_logprobs: list[float]
    llm_s: float
    calls: int
    segments: list[TokenSegment]

    @classmethod
    def empty(cls) -> EpisodeTokens:
        """An episode that made no model call (e.g. a scripted policy)."""
        return cls([], [], [], [], 0.0, 0, [])

    @property
    def generated_logprobs(self) -> list[float]:
        """The log-probabilities of the generated tokens only (one per 1 in the mask)."""
        return generated_only(self.rollout_logprobs, self.response_mask)


class EpisodeRecorder:
    """Appends one episode's tokens; thread-safe. Callers decide when a segment starts (a new prompt)."""

    def __init__(self) -> None:
        self._segments: list[TokenSegment] = []
        self._llm_s = 0.0
        self._lock = threading.Lock()

    @property
    def calls(self) -> int:
        """Model calls recorded so far (the episode's turns)."""
        with self._lock:
            return sum(s.calls for s in self._segments)

    @property
    def current(self) -> TokenSegment | None:
        with self._lock:
            return self._segments[-1] if self._segments else None

    def record_call(self, prompt_ids: list[int] | None, observation_ids: list[int], generated_ids: list[int],
                    generated_logprobs: list[float], llm_s: float, retract: int = 0) -> None:
        """Record one model call at once (so a failed call leaves no trace): `prompt_ids` starts a new segment,
        None continues the current one, first without its last `retract` ids (an end-of-turn token the model
        sampled that the chat template writes otherwise), then with `observation_ids` (mask 0); then the generated
        tokens (mask 1)."""
        if len(generated_ids) != len(generated_logprobs):
            raise ValueError(f"{len(generated_ids)} generated ids but {len(generated_logprobs)} logprobs")
        with self._lock:
            if prompt_ids is not None or not self._segments:
                self._segments.append(TokenSegment(list(prompt_ids or [])))
            segment = self._segments[-1]
            if prompt_ids is None:
                if retract:
                    del segment.response_ids[-retract:], segment.response_mask[-retract:]
                    del segment.rollout_logprobs[-retract:]
                segment.response_ids += observation_ids
                segment.response_mask += [0] * len(observation_ids)
                segment.rollout_logprobs += [0.0] * len(observation_ids)
            segment.response_ids += generated_ids
            segment.response_mask += [1] * len(generated_ids)
            segment.rollout_logprobs += [float(x) for x in generated_logprobs]
            segment.calls += 1
            self._llm_s += llm_s

    def snapshot(self) -> EpisodeTokens:
        """A copy of the record (later calls do not change it)."""
        with self._lock:
            segments = [s.copy() for s in self._segments]
            llm_s = self._llm_s
        if not segments:
            return EpisodeTokens.empty()
        last = segments[-1]
        return EpisodeTokens(list(last.prompt_ids), list(last.response_ids), list(last.response_mask),
                             list(last.rollout_logprobs), llm_s, sum(s.calls for s in segments), segments)

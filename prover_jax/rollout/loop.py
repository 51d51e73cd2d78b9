"""Multi-turn rollouts of a policy in a pool of environments, and continuations from past turns.

    rollout = Rollout(driver, tokenizer, RolloutConfig(sampling=SamplingParams(temperature=1.0)))
    group = rollout.run(pool, seeds=[7] * 8)          # 8 episodes of task 7 (pool.num_envs >= 8)
    more = rollout.continue_from(group[0], turn=3, k=8, pool=pool)   # 8 continuations from turn 3

Every episode is one append-only token sequence (see `chat`). The episodes of one task seed (a GRPO
group) and the K continuations of one boundary are one FORK request each: prefilled once. Each later
turn is an EXTENSION of the episode's live decode cache by [last token] + observation tokens. A
response ends at the family's stop strings (e.g. `</action>`), the template's end token, or
max_action_tokens; the env extracts the action (malformed -> valid=False feedback, the episode goes on)
and steps. An episode ends when the env is done, after max_turns turns, at its max_invalid-th
inadmissible action when that is set (`invalid_limit`, unsuccessful), or when the next turn would not
fit the engine's cache (`context_limit`, unsuccessful).

With `RolloutConfig.context_budget_mb`, each episode keeps the sampler's cache after every response
(`Trajectory.contexts`) while they fit the budget, so a continuation from turn t prefills only the
observation before turn t on top of that cache, as the episode itself did, instead of the whole
history; `release_contexts` gives them back (the RL step does, once its credit is complete).

`expert=True` plays the family's expert through the same loop (responses = rendered expert actions,
logprobs 0), which gives demonstrations tokenised exactly like rollouts.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import jax

from prover_jax.envs.base import PromptSpec
from prover_jax.envs.pool import EnvPool, StepResult
from prover_jax.rollout.chat import ChatTemplate, Tokenizer, observation_text
from prover_jax.rollout.play import Play, Episode, mix_seed
from prover_jax.rollout.trajectory import CONTEXT_LIMIT, DONE, INVALID_LIMIT, TURN_LIMIT, Trajectory, Turn
from prover_jax.sampling import STOP, Completion, Driver, Request, SamplingParams


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
    """sampling: policy sampling controls; max_action_tokens: token budget of one response;
    max_turns: turn limit (None: the family's); seed: base of every request's PRNG seed;
    system_prompt: replaces the family's system prompt (None: the family's own); max_invalid: the
    episode ends, unsuccessful, at its max_invalid-th inadmissible action (0: never);
    context_budget_mb: device memory for kept per-turn caches (`Trajectory.contexts`; 0: none kept)."""

    sampling: SamplingParams = SamplingParams(temperature=1.0)
    max_action_tokens: int = 128
    max_turns: int | None = None
    template: ChatTemplate = ChatTemplate()
    seed: int = 0
    system_prompt: str | None = None
    max_invalid: int = 0
    context_budget_mb: float = 0.0

    def __post_init__(self):
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError(f"rollout.max_turns must be >= 1 (None: the family's), got {self.max_turns!r}")
        if self.max_action_tokens < 1:
            raise ValueError(f"rollout.max_action_tokens must be >= 1, got {self.max_action_tokens!r}")
        if int(self.max_invalid) != self.max_invalid or self.max_invalid < 0:
            raise ValueError(f"rollout.max_invalid_actions must be an integer >= 0, got {self.max_invalid!r}")
        if not self.context_budget_mb >= 0:
            raise ValueError(f"rollout.context_budget_mb must be >= 0, got {self.context_budget_mb!r}")


class Rollout:
    """Runs episodes of a policy (a `Driver` over the policy's engine) in an `EnvPool`."""

    def __init__(self, driver: Driver, tokenizer: Tokenizer, config: RolloutConfig = RolloutConfig()):
        self.driver, self.tokenizer, self.config = driver, tokenizer, config
        if driver is not None and driver.decode_fn is None:
            driver.tokenizer, driver.decode_fn = tokenizer, tokenizer.decode
        end = tokenizer.encode(config.template.end, add_special_tokens=False)
        if len(end) != 1:
            raise ValueError(f"the template's end marker {config.template.end!r} must be one token of the "
                             f"tokenizer, got ids {end}")
        self.end_id = end[0]
        self._uids = 0
        self._continued: dict[tuple[int, int], int] = {}  # (uid, turn) -> continuations started
        self.context_bytes = 0  # device bytes of the contexts kept in trajectories (context_budget_mb)
        self._bytes_per_context: int | None = None

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    # Public API.
    def run(self, pool: EnvPool, seeds: Sequence[int], expert: bool = False,
            uids: Sequence[int] | None = None) -> list[Trajectory]:
        """One episode per seed, episode i in env i of `pool` (episodes with equal seeds form a group
        and share one prefill). Returns the finished trajectories in seed order.

        `uids` (default: a counter) name the episodes; sampling seeds derive from (config.seed, uid,
        turn) only (a group's first responses: samples 0.. of its first uid's seed), so a trainer that
        passes the same global uids on any number of hosts samples the same episodes."""
        play = self.play(expert)
        trajs = self.start(play, pool, seeds, uids)
        play.run()
        return trajs

    def start(self, play: "Play", pool: EnvPool, seeds: Sequence[int], uids: Sequence[int] | None = None,
              on_end: Callable[[Trajectory, int], None] | None = None) -> list[Trajectory]:
        """`run`'s episodes started in `play` (on_end called as each one ends); returns their
        trajectories, complete once they ended."""
        if len(seeds) > pool.num_envs:
            raise ValueError(f"{len(seeds)} episodes need as many envs; the pool has {pool.num_envs}")
        if uids is not None and len(uids) != len(seeds):
            raise ValueError(f"{len(uids)} uids for {len(seeds)} episodes")
        spec = pool.prompt
        system = spec.system if self.config.system_prompt is None else self.config.system_prompt
        first = pool.reset_some({i: s for i, s in enumerate(seeds)})
        snaps = pool.snapshots(range(len(seeds)))
        episodes, forks = [], {}
        for i, seed in enumerate(seeds):
            obs, info = first[i]
            uid = self._new_uid() if uids is None else int(uids[i])
            traj = Trajectory(env=pool.name, seed=int(seed), uid=uid, task=obs)
            traj.snapshots.append(snaps[i])
            opening = self.config.template.opening(
                system, observation_text(obs, info, spec.show_admissible, 0, self._max_turns(spec)))
            traj.append(self.encode(opening), policy=False)
            episodes.append(Episode(traj, i, pool))
            # a group is a task: tasks that open with the same text still sample apart
            forks.setdefault((int(seed), tuple(traj.tokens)), []).append(episodes[-1])
        play.add(pool, [(list(k[1]), v) for k, v in forks.items()], on_end)
        return [e.traj for e in episodes]

    def continue_from(self, trajectory: Trajectory, turn: int, k: int, pool: EnvPool,
                      expert: bool = False) -> list[Trajectory]:
        """K continuations of `trajectory` from the start of turn `turn` (env restored to
        snapshots[turn], agent history = tokens before that turn), each run to its end."""
        return self.continue_many([(trajectory, turn, k)], pool, expert)[0]

    def continue_many(self, starts: Sequence[tuple[Trajectory, int, int]], pool: EnvPool,
                      expert: bool = False) -> list[list[Trajectory]]:
        """`continue_from` for many (trajectory, turn, k) at once, all in one batch of the driver."""
        total = sum(k for _, _, k in starts)
        if total > pool.num_envs:
            raise ValueError(f"{total} continuations need as many envs; the pool has {pool.num_envs}")
        play = self.play(expert)
        out, env = [], 0
        for traj, turn, k in starts:
            out.append(play.add_continuations(pool, traj, turn, k, list(range(env, env + k))))
            env += k
        play.run()
        return out

    def release_contexts(self, trajectories: Sequence[Trajectory]) -> None:
        """Drops the kept per-turn caches of `trajectories` (their memory returns to the budget)."""
        for traj in trajectories:
            kept = sum(c is not None for c in traj.contexts)
            self.context_bytes -= kept * (self._bytes_per_context or 0)
            traj.contexts = [None] * len(traj.contexts)

    def _keep(self, traj: Trajectory, context) -> None:
        """Appends this turn's context to traj.contexts if the budget has room (else None)."""
        budget = self.config.context_budget_mb * 2 ** 20
        if context is not None and budget > 0 and traj.parent is None:  # continuations are not continued
            if self._bytes_per_context is None:
                self._bytes_per_context = sum(int(x.nbytes) for x in jax.tree.leaves(context.prefix))
            if self.context_bytes + self._bytes_per_context <= budget:
                self.context_bytes += self._bytes_per_context
                traj.contexts.append(context)
                return
        traj.contexts.append(None)

    def play(self, expert: bool = False) -> "Play":
        """An incremental episode loop over this rollout's driver (see `Play`)."""
        return Play(self, expert)

    # The loop.
    def _new_uid(self) -> int:
        self._uids += 1
        return self._uids - 1

    def _max_turns(self, spec: PromptSpec) -> int:
        return spec.max_turns if self.config.max_turns is None else self.config.max_turns

    def _request(self, prompt, ep_or_seed, turn: int, spec: PromptSpec, context=None,
                 num_samples: int = 1) -> Request:
        """The request of an episode's turn: `prompt` (with `context`: the tokens after it)."""
        cfg = self.config
        return Request(prompt, cfg.sampling, max_new_tokens=cfg.max_action_tokens,
                       seed=mix_seed(cfg.seed, ep_or_seed, turn), num_samples=num_samples,
                       stop_strings=spec.stop_strings, stop_ids=(self.end_id,), context=context,
                       keep_context=True)

    def _fits(self, ep: Episode, extra: int) -> bool:
        limit = None if self.driver is None else self.driver.engine.max_target_length
        return limit is None or len(ep.traj.tokens) + extra + self.config.max_action_tokens <= limit

    def _expert_responses(self, pool: EnvPool, episodes: list[Episode]):
        responses = pool.call("expert_response", [ep.env for ep in episodes])
        out = []
        for ep, text in zip(episodes, responses):
            if text is None:
                raise RuntimeError(f"env {ep.env} ({pool.name}) has no expert action in this state")
            tokens = self.encode(self.config.template.expert(text))
            out.append((ep, Completion(tokens, [0.0] * len(tokens), STOP, None)))
        return out

    def _record(self, ep: Episode, c: Completion, step: StepResult, spec: PromptSpec) -> list[int] | None:
        """Appends the turn (response `c`, env `step`) to the trajectory; returns the next prompt
        tokens, or None if it ended. `spec`: the prompt spec of the episode's pool."""
        info = step.info
        traj = ep.traj
        start = len(traj.tokens)
        traj.append(c.tokens, policy=True, logprobs=c.logprobs)
        traj.turns.append(Turn(start=start, end=len(traj.tokens), response=self.tokenizer.decode(c.tokens),
                               action=step.action, valid=bool(info.get("valid", False)),
                               observation=step.observation, reward=float(step.reward),
                               finish_reason=c.finish_reason))
        traj.snapshots.append(step.snapshot)
        traj.success, traj.score = bool(info.get("success", False)), float(info.get("score", 0.0))
        self._keep(traj, c.context)
        if step.done:
            return self._finish(ep, DONE)
        limit = self.config.max_invalid
        if limit and not traj.turns[-1].valid and sum(not t.valid for t in traj.turns) >= limit:
            return self._finish(ep, INVALID_LIMIT)
        if traj.num_turns >= self._max_turns(spec):
            return self._finish(ep, TURN_LIMIT)
        closed = c.finish_reason == STOP and c.stop == self.end_id
        text = self.config.template.after_response(
            observation_text(step.observation, info, spec.show_admissible, traj.num_turns, self._max_turns(spec)),
            closed)
        tokens = self.encode(text)
        if not self._fits(ep, len(tokens)):
            return self._finish(ep, CONTEXT_LIMIT)
        traj.append(tokens, policy=False)
        return tokens

    @staticmethod
    def _finish(ep: Episode, why: str) -> None:
        ep.traj.termination = why
        return None

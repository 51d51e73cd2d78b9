"""`critic`: turn labels from a frozen critic with privileged information, added to the GRPO advantage.

CriticSearch-style dense credit: a critic that knows what the agent does not (the exact value of a
state, or the goal's hidden details and a reference solution) labels every turn of every trajectory
good (+1) or bad (-1), or leaves it unlabelled (0: unknown / neutral / dropped). On the policy tokens
of turn t of trajectory i of a group:

    A_{i,t} = A^GRPO_i + beta * label_{i,t},     A^GRPO_i = R_i - mean_g(R)  (/ std + 1e-6 with
                                                 config.std_scope), beta = config.critic.beta

and 0 off the policy tokens. The turn reward is added to the outcome advantage as CriticSearch does,
NOT normalised: labels are already bounded in {-1, 0, +1}, so beta alone fixes their weight against
the outcome term (which lies in [-1, 1] at std_scope none); normalising the turn rewards over a group
would erase the signal of a group whose turns are all good (or all bad) and couple trajectories.
With a std_scope the outcome term is rescaled and the turn term is not.

Critics (`make_critic(config.credit.critic, env_name, env_kwargs, workdir)`, by critic.name; each
module registers its class with `@register_critic(name)` and is imported by the package):

  oracle  exact dynamic programming on any env with a reference policy (`Env.reference_policy`): a
          turn is good / bad when it raises / lowers that policy's success probability (`critic_oracle`).
  rules   the env's privileged pivot rules (`Env.pivot`): +1 the right choice at a pivot, -1 the
          mistake, 0 a routine move (`critic_rules`; household), cheap enough for long episodes.
  openai  an LLM over any OpenAI-compatible chat endpoint, shown the env's privileged facts about the
          task (`Env.privileged_facts`) and the whole trajectory, one call per trajectory (`critic_llm`).

Nothing raises into training: a failure leaves the turns concerned unlabelled (0, counted as dropped).

Metrics (every step): critic/calls (requests sent; cache hits are not calls), critic/cached,
critic/input_tokens, critic/output_tokens, critic/cost_usd, critic/turns (turns of the batch),
critic/good_frac and critic/bad_frac (labelled good / bad over all turns), critic/dropped (turns left
unlabelled by an error, a malformed or incomplete reply, the call budget or the DP state budget),
critic/dp_states (states the oracle expanded), time/critic_s, and credit/extra_policy_tokens = 0.
"""

from __future__ import annotations

import abc
import threading
import time
from typing import Any, Sequence

import ml_collections
import numpy as np

from prover_jax.credit.base import EXTRA_TOKENS, CreditMethod, CreditOutput, Merge, Needs, register_credit
from prover_jax.credit.common import broadcast, group_outcome_advantages
from prover_jax.judges.base import config_get
from prover_jax.registry import Registry
from prover_jax.rollout.trajectory import Trajectory

GOOD, BAD, NEUTRAL = 1, -1, 0
USAGE = ("calls", "cached", "input_tokens", "output_tokens", "cost_usd", "dropped", "dp_states")
METRICS = ("critic/calls", "critic/cached", "critic/input_tokens", "critic/output_tokens", "critic/cost_usd",
           "critic/turns", "critic/good_frac", "critic/bad_frac", "critic/dropped", "critic/dp_states",
           "time/critic_s")
MERGE = Merge(sums=tuple(f"critic/{k}" for k in USAGE) + ("critic/turns",),
              means=(("critic/good_frac", "critic/turns"), ("critic/bad_frac", "critic/turns")))


# ------------------------------------------------------------------------------------ the credit method

def turn_rewards(traj: Trajectory, labels: Sequence[int], beta: float) -> np.ndarray:
    """float32 [L]: beta * labels[t] on the policy tokens of turn t, 0 elsewhere."""
    per_turn = np.asarray(list(labels) + [0], np.float32)  # index -1 (no turn) reads the trailing 0
    out = np.float32(beta) * per_turn[traj.turn_ids()]
    return np.where(np.asarray(traj.policy_mask, bool), out, np.float32(0.0)).astype(np.float32)


def check_labels(traj: Trajectory, labels: Any) -> list[int]:
    """labels as a list of ints in {-1, 0, 1}, one per turn of `traj` (else a ValueError)."""
    try:
        out = [int(x) for x in labels]
    except (TypeError, ValueError) as e:
        raise ValueError(f"critic labels of trajectory {traj.uid} are not integers: {labels!r}") from e
    if len(out) != traj.num_turns or any(x not in (GOOD, BAD, NEUTRAL) for x in out):
        raise ValueError(f"the critic must label each of the {traj.num_turns} turns of trajectory {traj.uid} "
                         f"with -1, 0 or +1, got {labels!r}")
    return out


@register_credit("critic")
class Critic(CreditMethod):
    """Needs `critic` (`make_critic`): an object with label(group) -> labels[i][t] in {-1, 0, +1}
    (label_many(groups) when it has one), begin_step() and usage counters (USAGE)."""

    def __init__(self, config: Any, critic=None, seed: int = 0, **deps):
        super().__init__(config)
        if critic is None:
            raise ValueError("the critic credit method needs a critic (credit.critic.make_critic)")
        self.critic = critic
        section = config_get(config, "critic")
        self.beta = float(config_get(section, "beta", 0.2))

    @classmethod
    def default_config(cls) -> ml_collections.ConfigDict:
        """config.credit.critic: the critic (`make_critic`) and the turn reward's weight."""
        s = ml_collections.ConfigDict()
        s.name = "oracle"  # oracle (exact DP value rises; built-in envs) | rules (Env.pivot labels) | openai (LLM)
        s.beta = 0.2  # turn reward +beta (good) / -beta (bad) added to A^GRPO on its tokens
        s.oracle_eps = 0.1  # oracle reference policy: (1 - eps) expert + eps uniform over admissible actions
        s.oracle_tol = 1e-9  # oracle: |V(s_t+1) - V(s_t)| <= tol is labelled 0 (raise it: a spent turn is 0)
        s.oracle_max_states = 200_000  # oracle: most DP states expanded per step (~5k/s); then turns dropped
        s.openai = ml_collections.ConfigDict()  # the LLM critic (name = openai); one call per trajectory
        s.openai.base_url = ""  # any OpenAI-compatible endpoint (empty: the client's default)
        s.openai.model = "gpt-4.1-mini"  # the critic model
        s.openai.api_key_env = "OPENAI_API_KEY"  # env variable with the key (not needed when self-hosted)
        s.openai.timeout_s = 60.0  # each request attempt as a whole; a timeout drops the trajectory's labels (not retried)
        s.openai.max_retries = 4  # retries of 429 / 5xx / connection errors, exponential backoff
        s.openai.max_calls_per_step = 256  # budget; over it, trajectories stay unlabelled (critic/dropped)
        s.openai.usd_per_m_input = 0.4  # price per million prompt tokens (critic/cost_usd)
        s.openai.usd_per_m_output = 1.6  # price per million completion tokens
        s.openai.cache = True  # responses cached by content hash in WORKDIR/critic_cache
        s.openai.backoff_base_s = 1.0  # retry wait = base * 2^attempt (capped), Retry-After honoured
        s.openai.backoff_max_s = 30.0  # cap of one retry wait
        s.openai.max_concurrency = 16  # critic calls in flight at once
        s.openai.obs_chars = 600  # characters per observation in the prompt (fewer when the prompt is long)
        s.openai.max_chars = 24000  # the prompt's trajectory text is clipped to about this many characters
        s.openai.temperature = 0.0  # sampling temperature; < 0: not sent (models that reject it)
        s.openai.structured = True  # response_format json_schema; False: plain JSON asked in the prompt
        s.openai.enable_thinking = ml_collections.config_dict.placeholder(bool)  # as the judge's
        return s

    @classmethod
    def needs(cls, config: Any, groups: int, group_size: int) -> Needs:
        return Needs(critic=True, metrics=METRICS, merge=MERGE)

    def begin_step(self) -> None:
        self.critic.begin_step()

    def assign(self, groups: Sequence[Sequence[Trajectory]]) -> CreditOutput:
        critic = self.critic
        self.begin_step()
        t0 = time.perf_counter()
        if hasattr(critic, "label_many"):
            labels = critic.label_many(groups)
        else:
            labels = [critic.label(group) for group in groups]
        critic_s = time.perf_counter() - t0
        advantages, turns, good, bad = [], 0, 0, 0
        bases = group_outcome_advantages(groups, self.config)
        for group, group_labels, base in zip(groups, labels, bases, strict=True):
            out = []
            for traj, a, lab in zip(group, base, group_labels, strict=True):
                lab = check_labels(traj, lab)
                out.append(broadcast(traj, a) + turn_rewards(traj, lab, self.beta))
                turns += len(lab)
                good += lab.count(GOOD)
                bad += lab.count(BAD)
            advantages.append(out)
        usage = {k: float(getattr(critic, k, 0) or 0) for k in USAGE}
        metrics = {f"critic/{k}": v for k, v in usage.items()}
        metrics.update({"critic/turns": turns, "critic/good_frac": good / turns if turns else 0.0,
                        "critic/bad_frac": bad / turns if turns else 0.0, "time/critic_s": critic_s,
                        EXTRA_TOKENS: 0})
        return CreditOutput(advantages, metrics)


# -------------------------------------------------------------------------------------------- critics

class TurnCritic(abc.ABC):
    """Base of the built-in critics: per-step usage counters (USAGE), label / label_many."""

    def __init__(self):
        self._serial = threading.Lock()  # one labelling at a time (the critic's env is not thread-safe)
        self.begin_step()

    def begin_step(self) -> None:
        """Resets the step's counters and budgets (called by `Critic.assign` once per step)."""
        self.calls = self.cached = self.input_tokens = self.output_tokens = 0
        self.dropped = self.dp_states = 0

    @property
    def cost_usd(self) -> float:
        return 0.0

    def label(self, group: Sequence[Trajectory]) -> list[list[int]]:
        return self.label_many([group])[0]

    def label_many(self, groups: Sequence[Sequence[Trajectory]]) -> list[list[list[int]]]:
        flat = [t for group in groups for t in group]
        with self._serial:
            labels = self._label_all(flat)
        out, n = [], 0
        for group in groups:
            out.append(labels[n:n + len(group)])
            n += len(group)
        return out

    @abc.abstractmethod
    def _label_all(self, trajs: list[Trajectory]) -> list[list[int]]:
        """labels[i][t] for every trajectory; never raises (failures are 0 labels, counted as dropped)."""

    def close(self) -> None:
        """Releases resources (HTTP clients)."""

    @classmethod
    def from_section(cls, section: Any, env_name: str, env_kwargs: dict | None = None,
                     workdir: str | None = None, **kwargs) -> "TurnCritic":
        """The critic config.credit.critic (`section`) describes for env `env_name`; kwargs override the
        section's fields. Every registered critic defines it."""
        raise NotImplementedError(f"{cls.__name__} cannot be built from config.credit.critic")


# name (credit.critic.name) -> TurnCritic subclass; critic_oracle and critic_llm register theirs and
# are imported by the package (prover_jax/credit/__init__.py)
CRITICS: Registry = Registry("critic", field="credit.critic.name", load="prover_jax.credit")
register_critic = CRITICS.register


def make_critic(section: Any, env_name: str, env_kwargs: dict | None = None, workdir: str | None = None,
                **kwargs) -> TurnCritic:
    """The critic config.credit.critic names (`section`: that config section); kwargs override. ValueError
    listing the known names for an unknown one (registered with `register_critic`)."""
    name = config_get(section, "name")
    if name not in CRITICS:
        raise ValueError(f"unknown critic credit.critic.name={name!r}; choose {' or '.join(CRITICS.names())}")
    return CRITICS.get(name).from_section(section, env_name, env_kwargs, workdir, **kwargs)

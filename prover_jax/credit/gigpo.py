"""`gigpo`: Group-in-Group Policy Optimization (GiGPO, Feng et al. 2025; verl-agent's estimator).

For one task group of G trajectories, R_i = terminal success (common.rewards), T_i = number of turns:

    A_E(i)   = R_i - mean_g(R)                           [/ (std_g(R) + 1e-6) with gigpo.std]
    G_{i,t}  = sum_{k>=t} gamma^{k-t} r_{i,k},   r_{i,k} = R_i if k = T_i - 1 else 0
             = R_i * gamma^(T_i - 1 - t)
    A_S(i,t) = G_{i,t} - mean_{(j,u) in S(i,t)} G_{j,u}  [/ (std_S(G) + 1e-6) with gigpo.std]
               (0 when the anchor group S(i,t) is the turn alone)
    A        = A_E(i) + omega * A_S(i,t) on the policy tokens of turn t of trajectory i, 0 elsewhere.

Anchor groups S: within ONE task group, turn t of trajectory i is keyed by the state before it,
snapshots[t], compared through `judges.contrastive.state_key` (equality without the bookkeeping fields
`turn`, `note` and `done`), so a state reached at different turns, or revisited by one trajectory, is one anchor
group. Fallback for the whole task group when a trajectory has fewer than num_turns snapshots, a
snapshot is None or a replay record (`HISTORY` set, e.g. ALFWorld's: the game file and every action
so far, on which only identical action histories would meet), or comparing snapshots raises: the raw
observation text the agent saw before turn t (turns[t-1].observation; for t = 0 `traj.task`, the
first observation), verl-agent's anchor, which `gigpo.anchor = "observation"` takes everywhere. Text
is coarser: e.g. two different states can both answer an invalid action with the same "Nothing happens."

Step rewards: the terminal success on the last turn, for every family. This is exactly Turn.reward for
household, alfworld and searchqa (1.0 on the turn that succeeds, which ends the episode; 0 elsewhere);
shop's Turn.reward is the graded purchase score, which R (score == 1) does not follow, so both terms
use R and optimise the same objective.

Defaults (config.credit.gigpo): gamma 0.95, omega 1.0, std False, as verl-agent's ALFWorld recipe
(algorithm.gamma=0.95, gigpo.step_advantage_w=1.0, gigpo.mode=mean_norm). Unlike verl-agent, the
episode mean is over trajectories (verl-agent averages over all steps of the group), std is the
population std (as `outcome_advantages`), and anchors compare env states, not observation text.
"""

from __future__ import annotations

from typing import Any, Sequence

import ml_collections
import numpy as np

from prover_jax.credit.base import EXTRA_TOKENS, CreditMethod, CreditOutput, Merge, Needs, register_credit
from prover_jax.credit.common import broadcast, outcome_advantages, rewards
from prover_jax.judges.contrastive import IGNORED_FIELDS, Interner, state_key
from prover_jax.rollout.trajectory import Trajectory

METRICS = ("gigpo/anchor_groups", "gigpo/anchor_group_size", "gigpo/anchored_turn_frac",
           "gigpo/step_adv_abs", "gigpo/text_fallback_groups", "gigpo/turns")
MERGE = Merge(sums=("gigpo/anchor_groups", "gigpo/text_fallback_groups", "gigpo/turns"),
              means=(("gigpo/anchor_group_size", "gigpo/anchor_groups"), ("gigpo/anchored_turn_frac", "gigpo/turns"),
                     ("gigpo/step_adv_abs", "gigpo/turns")))


def step_returns(traj: Trajectory, gamma: float) -> np.ndarray:
    """G_t = R * gamma^(T-1-t), float64 [T]: the discounted return of terminal success from turn t."""
    return float(traj.success) * float(gamma) ** np.arange(traj.num_turns - 1, -1, -1, dtype=np.float64)


ANCHORS = ("state", "observation")


def anchor_ids(group: Sequence[Trajectory], ignore_fields: Sequence[str] = IGNORED_FIELDS, anchor: str = "state"
               ) -> tuple[list[np.ndarray], bool]:
    """Per trajectory, int [T]: an id per turn, equal for turns taken from equal states; and whether
    the observation text was used (anchor "observation", or the fallback: see module docstring)."""
    if anchor == "state" and all(
            len(t.snapshots) >= t.num_turns
            and all(s is not None and not getattr(s, "HISTORY", False) for s in t.snapshots[:t.num_turns])
            for t in group):
        intern = Interner()
        try:
            return [np.asarray([intern(state_key(s, ignore_fields)) for s in t.snapshots[:t.num_turns]],
                               np.int64) for t in group], False
        except Exception:  # noqa: BLE001  (snapshots that cannot be compared: fall back to text)
            pass
    intern = Interner()
    return [np.asarray([intern(t.task if k == 0 else t.turns[k - 1].observation) for k in range(t.num_turns)],
                       np.int64) for t in group], True


def step_advantages(ids: np.ndarray, returns: np.ndarray, use_std: bool) -> np.ndarray:
    """A_S over a task group's flattened turns: returns centred (and scaled) within equal ids;
    singletons 0."""
    out = np.zeros_like(returns, dtype=np.float64)
    for a in np.unique(ids):
        m = ids == a
        if m.sum() > 1:
            g = returns[m]
            d = g - g.mean()
            out[m] = d / (g.std() + 1e-6) if use_std else d
    return out


@register_credit("gigpo")
class GiGPO(CreditMethod):
    """Episode advantage plus omega times the step advantage within anchor-state groups."""

    def __init__(self, config: Any, **deps):
        super().__init__(config)
        g = config.gigpo
        if not 0.0 <= g.gamma <= 1.0:
            raise ValueError(f"credit.gigpo.gamma must be in [0, 1], got {g.gamma}")
        if g.anchor not in ANCHORS:
            raise ValueError(f"credit.gigpo.anchor must be one of {ANCHORS}, got {g.anchor!r}")
        self.gamma, self.omega, self.use_std, self.anchor = float(g.gamma), float(g.omega), bool(g.std), g.anchor

    @classmethod
    def default_config(cls) -> ml_collections.ConfigDict:
        """config.credit.gigpo."""
        s = ml_collections.ConfigDict()
        s.gamma = 0.95  # discount of the step returns
        s.omega = 1.0  # weight of the step advantage
        s.std = False  # divide both advantages by their group's std + 1e-6 (mean_std_norm)
        s.anchor = "state"  # state: equal env states (text where snapshots are replay records) | observation
        return s

    @classmethod
    def needs(cls, config: Any, groups: int, group_size: int) -> Needs:
        return Needs(metrics=METRICS, merge=MERGE, several_turns=True)

    def assign(self, groups: Sequence[Sequence[Trajectory]]) -> CreditOutput:
        out, sizes, turns, anchored, abs_sum, fallback = [], [], 0, 0, 0.0, 0
        for group in groups:
            ep = outcome_advantages([rewards(group)], "group" if self.use_std else "none")[0]
            ids, text = anchor_ids(group, anchor=self.anchor)
            fallback += text
            lens = [t.num_turns for t in group]
            flat_ids = np.concatenate(ids) if sum(lens) else np.zeros(0, np.int64)
            flat_g = np.concatenate([step_returns(t, self.gamma) for t in group]) if sum(lens) else np.zeros(0)
            a_s = step_advantages(flat_ids, flat_g, self.use_std)
            _, counts = np.unique(flat_ids, return_counts=True)
            sizes += [int(c) for c in counts if c > 1]
            turns += len(flat_ids)
            anchored += int(counts[counts > 1].sum())
            abs_sum += float(np.abs(a_s).sum())
            advs = []
            for t, a_e, a_s_t in zip(group, ep, np.split(a_s, np.cumsum(lens)[:-1])):
                adv = broadcast(t, a_e)
                mask = np.asarray(t.policy_mask, bool)
                for turn, a in zip(t.turns, a_s_t):
                    span = slice(turn.start, turn.end)
                    adv[span] += np.float32(self.omega * a) * mask[span]
                advs.append(adv.astype(np.float32))
            out.append(advs)
        metrics = {
            "gigpo/anchor_groups": len(sizes),
            "gigpo/anchor_group_size": float(np.mean(sizes)) if sizes else 0.0,
            "gigpo/anchored_turn_frac": anchored / turns if turns else 0.0,
            "gigpo/step_adv_abs": abs_sum / turns if turns else 0.0,
            "gigpo/text_fallback_groups": fallback,
            "gigpo/turns": turns,
            EXTRA_TOKENS: 0,
        }
        return CreditOutput(out, metrics)

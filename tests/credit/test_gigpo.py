"""GiGPO credit: anchor-state groups across turn indices, step advantages against hand computations,
the std / omega options, the observation-text fallback, and real household episodes."""

import dataclasses

import numpy as np
import pytest

from prover_jax.credit import EXTRA_TOKENS, credit_class, make_credit
from prover_jax.credit.gigpo import METRICS, anchor_ids
from prover_jax.envs import make
from prover_jax.envs.testing import uniform_policy
from prover_jax.rollout.trajectory import Trajectory, Turn
from prover_jax.training.config import default_config

ACT, OBS, PROMPT = 2, 3, 4  # policy tokens per turn, observation tokens after a turn, prompt tokens


@dataclasses.dataclass(frozen=True)
class S:
    pos: str
    turn: int  # bookkeeping: ignored by state equality


def traj(states, success, uid=0, observations=None, snapshots=True):
    """states[t]: the state before turn t (len = number of turns); the final state is 'end'."""
    n = len(states)
    observations = observations or [f"obs{uid}.{k}" for k in range(n)]
    t = Trajectory(env="fake", seed=0, uid=uid, task="task")
    t.append(range(PROMPT), policy=False)
    for k in range(n):
        start = len(t.tokens)
        t.append([10 + k] * ACT, policy=True, logprobs=[-0.5] * ACT)
        t.turns.append(Turn(start, start + ACT, f"a{k}", f"a{k}", True, observations[k], 0.0, "stop"))
        t.append([1] * OBS, policy=False)
    if snapshots:
        t.snapshots = [S(p, k) for k, p in enumerate(states)] + [S("end", n)]
    t.success, t.score, t.termination = success, float(success), "done"
    return t


def config(gamma=0.5, omega=1.0, std=False):
    c = default_config().credit
    c.gigpo.update(dict(gamma=gamma, omega=omega, std=std))
    return c


def per_turn(t, adv):
    """The advantage of each turn (constant over its tokens), checking it is zero off policy tokens."""
    mask = np.asarray(t.policy_mask)
    assert adv.shape == (len(t.tokens),) and adv.dtype == np.float32
    np.testing.assert_array_equal(adv[~mask], 0)
    out = []
    for turn in t.turns:
        seg = adv[turn.start:turn.end]
        assert np.all(seg == seg[0])
        out.append(float(seg[0]))
    return np.asarray(out)


def hand_group():
    """A passes x at turn 1 and B at turn 2; A and C pass y at turns 2 and 1; z is B's alone.
    gamma = 0.5: G_A = [.25, .5, 1], G_B = [0, 0, 0], G_C = [.5, 1]."""
    return [traj(["start", "x", "y"], True, 0), traj(["start", "z", "x"], False, 1),
            traj(["start", "y"], True, 2)]


# A_E = R - 2/3; A_S: start {A0 .25, B0 0, C0 .5} -> 0, -.25, +.25; x {A1 .5, B2 0} -> +.25, -.25;
# y {A2 1, C1 1} -> 0, 0; z {B1} singleton -> 0.
A_E = np.array([1 / 3, -2 / 3, 1 / 3])
A_S = [np.array([0.0, 0.25, 0.0]), np.array([-0.25, 0.0, -0.25]), np.array([0.25, 0.0])]


def test_registered_and_needs():
    needs = credit_class("gigpo").needs(config(), groups=2, group_size=4)
    assert not (needs.judge or needs.verifier or needs.critic or needs.extra_episodes)
    assert set(needs.metrics) == set(METRICS)
    defaults = default_config().credit.gigpo
    assert (defaults.gamma, defaults.omega, defaults.std) == (0.95, 1.0, False)


def test_anchor_groups_across_turn_indices():
    group = hand_group()
    ids, text = anchor_ids(group)
    assert not text
    assert ids[0][1] == ids[1][2] and ids[0][2] == ids[2][1]  # x and y at different turn indices
    assert ids[0][0] == ids[1][0] == ids[2][0] and len({ids[1][1], ids[0][1], ids[0][2], ids[0][0]}) == 4
    out = make_credit("gigpo", config()).assign([group])
    for i, t in enumerate(group):
        np.testing.assert_allclose(per_turn(t, out.advantages[0][i]), A_E[i] + A_S[i], atol=1e-6)
    m = out.metrics
    assert m["gigpo/anchor_groups"] == 3 and m["gigpo/text_fallback_groups"] == 0 and m[EXTRA_TOKENS] == 0
    assert m["gigpo/anchor_group_size"] == pytest.approx(7 / 3)
    assert m["gigpo/anchored_turn_frac"] == pytest.approx(7 / 8)
    assert m["gigpo/step_adv_abs"] == pytest.approx(1.0 / 8)
    assert set(m) == set(METRICS) | {EXTRA_TOKENS}


def test_omega_scales_the_step_term_only():
    group = hand_group()
    for omega in (0.0, 2.0):
        out = make_credit("gigpo", config(omega=omega)).assign([group])
        for i, t in enumerate(group):
            np.testing.assert_allclose(per_turn(t, out.advantages[0][i]), A_E[i] + omega * A_S[i], atol=1e-6)
    grpo = make_credit("grpo", default_config().credit).assign([group])
    out = make_credit("gigpo", config(omega=0.0)).assign([group])
    for a, b in zip(out.advantages[0], grpo.advantages[0]):
        np.testing.assert_allclose(a, b, atol=1e-7)


def test_std_option():
    group = hand_group()
    out = make_credit("gigpo", config(std=True)).assign([group])
    ep = A_E / (np.sqrt(2 / 9) + 1e-6)  # std of R = [1, 0, 1]
    r = np.sqrt(1.5)  # start group G = [.25, 0, .5]: .25 / std = .25 / sqrt(1 / 24)
    step = [np.array([0.0, 1.0, 0.0]), np.array([-r, 0.0, -1.0]), np.array([r, 0.0])]  # x: .25 / .25
    for i, t in enumerate(group):
        np.testing.assert_allclose(per_turn(t, out.advantages[0][i]), ep[i] + step[i], rtol=1e-4, atol=1e-5)


def test_groups_are_separate_and_singletons_zero():
    """Equal states in different task groups are not one anchor group; a group of one trajectory
    without revisits has only singleton anchors: plain A_E (= 0 there)."""
    a, b = traj(["start", "x"], True, 0), traj(["start", "x"], False, 1)
    out = make_credit("gigpo", config()).assign([[a], [b]])
    for t, adv in zip((a, b), (out.advantages[0][0], out.advantages[1][0])):
        np.testing.assert_array_equal(per_turn(t, adv), [0.0, 0.0])
    assert out.metrics["gigpo/anchor_groups"] == 0 and out.metrics["gigpo/anchor_group_size"] == 0
    # a revisit inside one trajectory is an anchor group: x at turns 1 and 3, G = [.125, .25, .5, 1]
    c = traj(["start", "x", "y", "x"], True, 2)
    out = make_credit("gigpo", config()).assign([[c]])
    np.testing.assert_allclose(per_turn(c, out.advantages[0][0]), [0.0, -0.375, 0.0, 0.375])


def test_observation_text_fallback():
    """No snapshots: the state before turn t is the observation of turn t-1 (turn 0: the task)."""
    a = traj(["-"] * 3, True, 0, observations=["o1", "o2", "win"], snapshots=False)
    b = traj(["-"] * 3, False, 1, observations=["o3", "o1", "lose"], snapshots=False)
    ids, text = anchor_ids([a, b])
    assert text and ids[0][0] == ids[1][0] and ids[0][1] == ids[1][2] and ids[0][2] != ids[1][1]
    out = make_credit("gigpo", config()).assign([[a, b]])
    # A_E = +-.5; G_a = [.25, .5, 1], G_b = 0; start {.25, 0} -> +-.125; o1 {a1 .5, b2 0} -> +-.25
    np.testing.assert_allclose(per_turn(a, out.advantages[0][0]), [0.625, 0.75, 0.5], atol=1e-6)
    np.testing.assert_allclose(per_turn(b, out.advantages[0][1]), [-0.625, -0.5, -0.75], atol=1e-6)
    assert out.metrics["gigpo/text_fallback_groups"] == 1 and out.metrics["gigpo/anchor_groups"] == 2


@dataclasses.dataclass(frozen=True)
class Replay:
    """A snapshot that is a replay record, as ALFWorld's: equal only for equal action histories."""
    HISTORY = True
    actions: tuple


def test_replay_records_and_anchor_observation_anchor_on_text():
    """Two different action histories reach the same room: equal observation, unequal records. They
    meet by text (verl-agent's anchor) with replay-record snapshots or `gigpo.anchor = observation`."""
    a = traj(["-"] * 3, True, 0, observations=["hall", "room", "win"])
    b = traj(["-"] * 3, False, 1, observations=["door", "room", "lose"])
    assert not anchor_ids([a, b])[1] and anchor_ids([a, b], anchor="observation")[1]
    for t, path in ((a, ("n", "e", "x")), (b, ("e", "n", "y"))):
        t.snapshots = [Replay(path[:k]) for k in range(t.num_turns + 1)]
    ids, text = anchor_ids([a, b])
    assert text and ids[0][2] == ids[1][2] and ids[0][1] != ids[1][1]
    c = config()
    c.gigpo.anchor = "history"
    with pytest.raises(ValueError, match="credit.gigpo.anchor must be one of"):
        make_credit("gigpo", c)


@pytest.mark.parametrize("case", ["missing_one", "none", "incomparable"])
def test_fallback_triggers(case):
    group = hand_group()
    if case == "missing_one":
        group[1].snapshots = group[1].snapshots[:1]
    elif case == "none":
        group[2].snapshots[1] = None
    else:  # arrays inside snapshots: unhashable, and == raises when compared
        for t in group:
            t.snapshots = [np.arange(3) + k for k in range(t.num_turns + 1)]
    assert anchor_ids(group)[1]
    # states that are unhashable but comparable (lists) still group by state
    for t in group:
        t.snapshots = [[p] for p in ["start"] + ["s"] * t.num_turns]
    ids, text = anchor_ids(group)
    assert not text and ids[0][1] == ids[1][1] == ids[2][1]


def play(env, seed, uid, policy, rng):
    """A household episode as a Trajectory: 2 policy tokens per turn, 1 observation token after it."""
    obs, info = env.reset(seed)
    t = Trajectory(env="household", seed=seed, uid=uid, task=obs)
    t.append(range(3), policy=False)
    t.snapshots.append(env.snapshot())
    done = False
    while not done:
        action = policy(info, rng)
        obs, reward, done, info = env.step(action)
        start = len(t.tokens)
        t.append([5, 6], policy=True, logprobs=[-1.0, -1.0])
        t.turns.append(Turn(start, start + 2, action, action, info["valid"], obs, reward, "stop"))
        t.append([7], policy=False)
        t.snapshots.append(env.snapshot())
    t.success, t.score, t.termination = bool(info["success"]), float(info["score"]), "done"
    return t


def test_household_expert_and_random():
    env = make("household", task_type="pick_and_place", max_turns=8, expert_turns=(3, 6), num_receptacles=4,
               num_objects=0, num_decoys=1)
    rng = np.random.default_rng(0)
    expert = lambda info, rng: info["expert"]
    rand = lambda info, rng: (lambda p: list(p)[rng.integers(len(p))])(uniform_policy("", info))
    group = [play(env, 3, i, expert if i < 2 else rand, rng) for i in range(6)]
    r = np.array([t.success for t in group], float)
    assert r[:2].all() and 0 < r.mean() < 1
    for t in group:  # household's turn rewards: 1.0 on the (last) success turn only = what gigpo uses
        rewards = [turn.reward for turn in t.turns]
        assert rewards == [0.0] * (t.num_turns - 1) + [float(t.success)]
    ids, text = anchor_ids(group)
    assert not text
    where = {}
    for i, row in enumerate(ids):
        for k, a in enumerate(row):
            where.setdefault(int(a), []).append((i, k))
    assert max(len(v) for v in where.values()) > 1
    assert any(len({k for _, k in v}) > 1 for v in where.values())  # a state met at different turns
    out = make_credit("gigpo", config(gamma=0.95)).assign([group])
    assert out.metrics["gigpo/anchor_groups"] >= 1 and out.metrics["gigpo/anchor_group_size"] > 1
    # A_S sums to 0 in every anchor group, A_E over the group: token sum = ACT * sum_i T_i A_E(i)
    a_e = r - r.mean()
    total = sum(float(adv.sum(dtype=np.float64)) for adv in out.advantages[0])
    assert total == pytest.approx(2 * sum(t.num_turns * a for t, a in zip(group, a_e)), abs=1e-4)
    # the expert runs share every state and return: their step advantages are equal turn by turn
    np.testing.assert_allclose(out.advantages[0][0], out.advantages[0][1])
    for t, adv in zip(group, out.advantages[0]):
        per_turn(t, adv)

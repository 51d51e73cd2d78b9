"""GRPO learns, and the test can tell when it does not: from a fixed weak start on 4 fixed tasks
(tests/helpers/learning_probe.py), 10 GRPO steps raise paired training success by >= 25 points; the
same run with the advantage's sign flipped, or with the sampler never given the new weights, does not."""

import pytest

from helpers.learning_probe import Probe, Run

GAIN = 0.25  # points of training success (as a fraction) that GRPO must add within Probe.steps steps


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    run = Run(Probe(), str(tmp_path_factory.mktemp("learning_probe")))
    yield run
    run.close()


def test_grpo_raises_training_success(probe):
    after, curve = probe.play("grpo")
    assert after - probe.before >= GAIN, (probe.before, after, curve)


@pytest.mark.parametrize("variant", ["flipped", "frozen"])
def test_broken_learning_fails_the_same_threshold(probe, variant):
    after, curve = probe.play(variant)
    assert after - probe.before < GAIN, (variant, probe.before, after, curve)
    if variant == "frozen":  # the same weights and sampling seeds play the same episodes
        assert after == probe.before

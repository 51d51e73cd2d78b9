"""The one name -> factory table used by envs, credit methods, judges, aggregations and optimizers."""

import pytest

from prover_jax.registry import Registry


def test_register_make_names_and_errors():
    r = Registry("widget", field="model.widget")

    @r.register("b")
    def make_b(x=1):
        return ("b", x)

    r.add("a", lambda: "a")
    assert r.names() == ["a", "b"] and "a" in r and "c" not in r
    assert r.make("b", x=3) == ("b", 3) and r.get("a")() == "a"
    with pytest.raises(ValueError, match=r"unknown widget 'c' \(model.widget\); known: a, b"):
        r.get("c")

    def make_b(x=2):  # a different definition under a taken name
        return x

    make_b.__qualname__ = "other"
    with pytest.raises(ValueError, match="widget 'b' registered twice"):
        r.add("b", make_b)


def test_lazy_members_import_on_first_use():
    r = Registry("judge", lazy={"random": "prover_jax.judges.random_judge"})
    assert r.names() == ["random"]  # known before its module is imported
    with pytest.raises(ValueError, match="unknown judge 'oracle'; known: random"):
        r.get("oracle")


@pytest.mark.parametrize("module,table,field,members", [
    ("prover_jax.envs.base", "ENVS", "env.name", {"household", "shop", "webshop", "searchqa", "alfworld"}),
    ("prover_jax.credit.base", "METHODS", "credit.method", {"grpo", "prover", "budget_grpo", "gigpo",
                                                            "spo_chain", "critic"}),
    ("prover_jax.judges.base", "JUDGES", "judge.name", {"random", "contrastive", "openai"}),
    ("prover_jax.training.loss", "AGGREGATIONS", "loss.aggregation", {"token-mean", "seq-mean-token-mean",
                                                                      "seq-mean-token-sum-norm"}),
    ("prover_jax.training.optim", "OPTIMIZERS", "optim.name", {"adamw", "adam", "sgd"}),
])
def test_every_selection_by_name_uses_a_registry(module, table, field, members):
    import importlib

    r = getattr(importlib.import_module(module), table)
    assert isinstance(r, Registry) and members <= set(r.names())
    with pytest.raises(ValueError, match=rf"\({field}\); known: "):
        r.get("no-such-name")

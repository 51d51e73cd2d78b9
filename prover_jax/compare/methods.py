"""Method specs of `prover-compare --methods=...`: NAME[:KEY=VALUE,...] -> credit method + config overrides.

    methods = parse_methods("grpo,prover:judge=random,k=4,prover:credit.prover.lam=0.5", config)
    methods[1].overrides      # (("judge.name", "random"), ("credit.prover.k", "4"))
    methods[1].slug           # "prover+judge=random+k=4": the run folder's name

NAME sets config.credit.method (a registered credit method). KEY resolves, in this order, to:
  a short key of SHORT_KEYS (judge=X -> judge.name=X);
  a dotted key, as written (credit.prover.lam=0.5 -> --config.credit.prover.lam=0.5);
  a bare field of the method's own section, credit.NAME.KEY (prover:k=4 -> credit.prover.k=4),
  else of credit.KEY (grpo:std_scope=group), else a top-level field.
Commas separate methods and their keys alike: a piece KEY=VALUE continues the previous method's keys;
brackets and quotes protect commas inside a value. Every key must exist in the config, and VALUE must
parse as that field's type, before any run starts.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import re

SHORT_KEYS = {"judge": "judge.name"}
# overrides that change only the RL phase: runs with no other overrides can share one SFT warm start
RL_ONLY_PREFIXES = ("credit.", "judge.")
RESERVED = {"credit.method": "--methods", "seed": "--seeds"}


@dataclasses.dataclass(frozen=True)
class Method:
    spec: str  # as written, e.g. "prover:judge=random": the label in the report
    name: str  # config.credit.method
    overrides: tuple[tuple[str, str], ...] = ()  # (dotted config key, raw value), in the order written
    keys_written: tuple[str, ...] = ()  # the keys as written (for the slug)

    @property
    def slug(self) -> str:
        parts = [self.name] + [f"{k}={v}" for k, (_, v) in zip(self.keys_written, self.overrides)]
        return re.sub(r"[^A-Za-z0-9._=+-]", "_", "+".join(parts))

    @property
    def shares_sft(self) -> bool:
        """Whether this method's runs can start from the shared SFT warm start (RL-only overrides)."""
        return all(k.startswith(RL_ONLY_PREFIXES) for k, _ in self.overrides)

    def all_overrides(self) -> list[tuple[str, str]]:
        return [("credit.method", self.name), *self.overrides]


def split_top(text: str, sep: str = ",") -> list[str]:
    """`text` split at `sep` outside brackets and quotes."""
    out, depth, quote, cur = [], 0, None, []
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0:
            out.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    out.append("".join(cur))
    return out


def get_field(config, key: str):
    """config's field at dotted `key`; KeyError when there is none."""
    node = config
    for part in key.split("."):
        if not hasattr(node, "keys") or part not in node:
            raise KeyError(key)
        node = node[part]
    return node


def parse_value(current, raw: str):
    """`raw` (command-line text) as a value of the type of `current` (the field's present value)."""
    if isinstance(current, bool):
        low = raw.strip().lower()
        if low in ("true", "1", "yes"):
            return True
        if low in ("false", "0", "no"):
            return False
        raise ValueError(f"expected true/false, got {raw!r}")
    if isinstance(current, str) or current is None:
        return raw
    value = ast.literal_eval(raw)
    if isinstance(current, float) and isinstance(value, int):
        value = float(value)
    if not isinstance(value, type(current)) and not (isinstance(current, (tuple, list))
                                                     and isinstance(value, (tuple, list))):
        raise ValueError(f"expected a {type(current).__name__}, got {raw!r}")
    return value


def apply_overrides(config, overrides):
    """A copy of `config` with the (key, raw value) overrides set; ValueError naming a bad one."""
    config = copy.deepcopy(config)
    for key, raw in overrides:
        try:
            current = get_field(config, key)
        except KeyError:
            raise ValueError(f"no config field {key!r}") from None
        try:
            value = parse_value(current, raw)
        except (ValueError, SyntaxError) as e:
            raise ValueError(f"config field {key!r}: {e}") from None
        *parents, leaf = key.split(".")
        node = config
        for p in parents:
            node = node[p]
        with node.ignore_type() if hasattr(node, "ignore_type") else _nothing():
            node[leaf] = value
    return config


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def resolve_key(key: str, name: str, config) -> str:
    if key in SHORT_KEYS:
        return SHORT_KEYS[key]
    tried = [key] if "." in key else [f"credit.{name}.{key}", f"credit.{key}", key]
    for candidate in tried:
        try:
            get_field(config, candidate)
            return candidate
        except KeyError:
            pass
    raise ValueError(f"no config field {key!r} (tried {', '.join(tried)})")


def parse_methods(text: str, config, credit_names=None, judge_names=None) -> list[Method]:
    """The methods of a --methods value, validated against `config` and the registries (names of the
    registered credit methods and judges; read from prover_jax when not given). ValueError when a
    name, key or value is wrong, or two methods would share a run folder."""
    if credit_names is None:
        from prover_jax.credit import credit_names as _names
        credit_names = _names()
    if judge_names is None:
        from prover_jax.judges import names as _judges
        judge_names = _judges()
    specs: list[str] = []
    for piece in (p.strip() for p in split_top(text or "")):
        if not piece:
            continue
        head = piece.split("=", 1)[0]
        if "=" in piece and ":" not in head and specs:
            specs[-1] += "," + piece  # KEY=VALUE continues the previous method's keys
        else:
            specs.append(piece)
    if not specs:
        raise ValueError("--methods is empty")
    methods, slugs = [], {}
    for spec in specs:
        name, _, args = spec.partition(":")
        name = name.strip()
        if name not in credit_names:
            raise ValueError(f"unknown credit method {name!r} in --methods={text!r}; known: "
                             f"{', '.join(sorted(credit_names))}")
        keys, written = [], []
        for kv in (split_top(args) if args.strip() else []):
            k, eq, v = kv.partition("=")
            if not eq or not k.strip():
                raise ValueError(f"method {spec!r}: {kv!r} is not KEY=VALUE")
            try:
                key = resolve_key(k.strip(), name, config)
            except ValueError as e:
                raise ValueError(f"method {spec!r}: {e}") from None
            if key in RESERVED:
                raise ValueError(f"method {spec!r}: {key} is set by {RESERVED[key]}")
            if key == "judge.name" and v.strip() not in judge_names:
                raise ValueError(f"method {spec!r}: unknown judge {v.strip()!r}; known: {', '.join(judge_names)}")
            keys.append((key, v.strip()))
            written.append(k.strip())
        method = Method(spec, name, tuple(keys), tuple(written))
        try:
            apply_overrides(config, method.all_overrides())
        except ValueError as e:
            raise ValueError(f"method {spec!r}: {e}") from None
        if method.slug in slugs or method.slug.startswith("_"):
            raise ValueError(f"methods {slugs.get(method.slug, '?')!r} and {spec!r} would share the run "
                             f"folder {method.slug!r}")
        slugs[method.slug] = spec
        methods.append(method)
    return methods

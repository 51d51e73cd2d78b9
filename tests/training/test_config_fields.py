"""Every config field is declared, with a comment, in one place: training/config.py, or, for a credit
method's own section config.credit.<name>, the method's `default_config` next to its maths:

(a) each leaf of `default_config()` carries a comment on its first assignment in config.py or in its
    method's `default_config` (trailing, or a comment line right above it);
(b) every field the package reads or writes through the training config (`c.<section>.<field>`,
    `config.<section>...`, `self.config...`, section aliases such as `r = config.rollout`, `loss_cfg`,
    and `.get("f")` / `getattr(x, "f")` / `config_get(x, "f")` on any of them) is declared there;
(c) the shipped config files under configs/ set only declared fields (env.kwargs is free-form: the
    family's own keyword arguments), and every field they set carries a comment (configs/README.md).
"""

from __future__ import annotations

import ast
import glob
import importlib.machinery
import inspect
import os
import textwrap

import ml_collections
import pytest

from prover_jax.credit.base import CreditMethod, credit_class, credit_names
from prover_jax.training import config as config_lib
from prover_jax.training.config import default_config
from prover_jax.training.config_source import FREE, Source, assignments, leaves

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, "prover_jax")
CONFIGS = sorted(glob.glob(os.path.join(ROOT, "configs", "*.py")))
# Names that hold the whole training config (also as self.<name>), and, inside packages built from
# one section, the names that hold a section there (credit methods get config.credit, make_critic its
# critic part, judges config.judge).
ROOT_NAMES = ("c", "config", "cfg")
PACKAGE_SECTIONS = {"credit": {"config": "credit", "section": "credit.critic"}, "judges": {"section": "judge"}}
LOOKUPS = ("get", "config_get", "getattr")  # x.get("f", d), config_get(x, "f", d), getattr(x, "f", d)


# ------------------------------------------------------------------------------------------- helpers

def declared(path: list[str], d: ml_collections.ConfigDict | None = None) -> bool:
    """Whether the access path names a field of default_config (anything past a leaf, a free-form
    section or a ConfigDict method is the value's business)."""
    node = default_config() if d is None else d
    for i, key in enumerate(path):
        if ".".join(path[:i]) in FREE or not isinstance(node, ml_collections.ConfigDict):
            return True
        if key not in node:
            return hasattr(ml_collections.ConfigDict, key)
        node = node[key]
    return True


# ------------------------------------------------------------------------- (a) config.py's comments

def declarations() -> list[tuple[str, str, str, str]]:
    """(where, source, root name, field prefix) of every place fields are declared: config.py (`c.<field>`)
    and each registered credit method's `default_config` (`s.<field>` of config.credit.<name>)."""
    out = [("config.py", open(config_lib.__file__).read(), "c", "")]
    for name in credit_names():
        fn = credit_class(name).default_config
        if fn.__func__ is not CreditMethod.default_config.__func__:
            out.append((f"{name}.default_config", textwrap.dedent(inspect.getsource(fn)), "s", f"credit.{name}."))
    return out


def test_every_declared_field_has_a_comment():
    first = {}
    for where, source, root, prefix in declarations():
        src = Source(source)
        for path, stmt in assignments(source, root):
            first.setdefault(prefix + path, (where, stmt, src.bare(stmt)))
    fields = leaves(default_config())
    missing = sorted(set(fields) - set(first))
    assert not missing, f"leaves of default_config() declared in neither config.py nor a default_config: {missing}"
    bare = [f"{first[p][0]}:{first[p][1].lineno} {p}" for p in sorted(fields) if first[p][2]]
    assert not bare, "fields declared without a comment:\n" + "\n".join(bare)


def test_the_comment_check_sees_method_sections():
    """A method section's field without a comment is caught (else the check above proves nothing)."""
    src = "def default_config(cls):\n    s = ConfigDict()\n    s.k = 8  # continuations\n    s.bare = 1\n    return s\n"
    assert [(p, Source(src).bare(stmt)) for p, stmt in assignments(src, "s")] == [
        ("k", False), ("bare", True)]


# ------------------------------------------------------------------ (b) every field the code reads

def _strings(node: ast.AST) -> list[str] | None:
    """The strings of a literal str or tuple / list of strs."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List)) and all(_strings(e) for e in node.elts):
        return [e.value for e in node.elts]
    return None


class _Reads(ast.NodeVisitor):
    """Config access paths of one module: (line, ["section", "field", ...]). Names are looked up in
    the enclosing functions: aliases of config sections (`r = config.rollout`) and names of literal
    keys (`keys = ("a", "b")`, `for k in keys`), so `config_get(sub, k)` reads sub.a and sub.b."""

    def __init__(self, sections: dict[str, str] | None):
        self.sections = sections or {}
        self.scopes: list[dict[str, list[str] | None]] = [{}]  # name -> config path
        self.keys: list[dict[str, list[str]]] = [{}]  # name -> the literal keys it stands for
        self.reads: list[tuple[int, list[str]]] = []

    def _named(self, scopes, name):
        for scope in reversed(scopes):
            if name in scope:
                return True, scope[name]
        return False, None

    def resolve(self, node: ast.AST) -> list[str] | None:
        """The config path `node` evaluates to ([] = the whole config), None if not a config."""
        if isinstance(node, ast.Name):
            found, path = self._named(self.scopes, node.id)
            if found:
                return path
            if node.id in self.sections:
                return self.sections[node.id].split(".")
            if node.id in ROOT_NAMES:
                return []
            if node.id.endswith("_cfg") and node.id[:-4] in default_config():
                return [node.id[:-4]]  # loss_cfg = config.loss
            return None
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                if node.attr in self.sections:
                    return self.sections[node.attr].split(".")
                return [] if node.attr in ROOT_NAMES else None
            base = self.resolve(node.value)
            return None if base is None else base + [node.attr]
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id == "default_config":
                return []
            keys = self.lookup(node)
            if keys and len(keys[1]) == 1:
                base = self.resolve(keys[0])
                return None if base is None else base + keys[1]
        return None

    def lookup(self, call: ast.Call) -> tuple[ast.AST, list[str]] | None:
        """(object, keys) of x.get(key, ...), config_get(x, key, ...), getattr(x, key, ...)."""
        f, args = call.func, call.args
        if isinstance(f, ast.Attribute) and f.attr == "get" and args:
            obj, key = f.value, args[0]
        elif isinstance(f, ast.Name) and f.id in ("config_get", "getattr") and len(args) >= 2:
            obj, key = args[0], args[1]
        else:
            return None
        keys = _strings(key) if isinstance(key, ast.Constant) else (
            self._named(self.keys, key.id)[1] if isinstance(key, ast.Name) else None)
        return (obj, keys) if keys else None

    def record(self, node: ast.AST, path: list[str] | None) -> None:
        # the whole config's attributes count from a known top-level name on (`c` is often something
        # else: a Completion's c.tokens is not a config read)
        if path and path[0] in default_config():
            self.reads.append((node.lineno, path))

    def visit_Attribute(self, node):
        self.record(node, self.resolve(node))
        self.generic_visit(node)

    def visit_Call(self, node):
        found = self.lookup(node)
        if found:
            base = self.resolve(found[0])
            for key in found[1]:
                self.record(node, None if base is None else base + [key])
        self.generic_visit(node)

    def _function(self, node):
        scope: dict[str, list[str] | None] = {}
        keys: dict[str, list[str]] = {}
        self.scopes.append(scope)
        self.keys.append(keys)
        for n in ast.walk(node):
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    pairs = (zip(t.elts, n.value.elts) if isinstance(t, ast.Tuple)
                             and isinstance(n.value, ast.Tuple) and len(t.elts) == len(n.value.elts)
                             else [(t, n.value)])
                    for name, value in pairs:
                        if isinstance(name, ast.Name):
                            path = self.resolve(value)
                            # a name bound to different things in one function is no alias
                            scope[name.id] = path if scope.get(name.id, path) == path else None
                            if _strings(value) and isinstance(value, (ast.Tuple, ast.List)):
                                keys[name.id] = _strings(value)
            elif isinstance(n, (ast.comprehension, ast.For)) and isinstance(n.target, ast.Name):
                loop = _strings(n.iter) or (self._named(self.keys, n.iter.id)[1]
                                            if isinstance(n.iter, ast.Name) else None)
                if loop:
                    keys[n.target.id] = loop
        self.generic_visit(node)
        self.scopes.pop()
        self.keys.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function


def config_reads(source: str, sections: dict[str, str] | None = None) -> list[tuple[int, list[str]]]:
    v = _Reads(sections)
    v.visit(ast.parse(source))
    return v.reads


def undeclared_reads(source: str, sections: dict[str, str] | None = None) -> list[tuple[int, str]]:
    return [(line, ".".join(p)) for line, p in config_reads(source, sections) if not declared(p)]


def test_every_field_the_package_reads_is_declared():
    bad = []
    for path in sorted(glob.glob(os.path.join(PACKAGE, "**", "*.py"), recursive=True)):
        rel = os.path.relpath(path, PACKAGE)
        if rel == os.path.join("training", "config.py"):
            continue
        sections = PACKAGE_SECTIONS.get(rel.split(os.sep)[0])
        bad += [f"prover_jax/{rel}:{line} {field}" for line, field in undeclared_reads(open(path).read(), sections)]
    assert not bad, "config fields read but not declared in training/config.py:\n" + "\n".join(bad)


def test_the_scan_sees_reads():
    """The scan finds what it must (else test_every_field_the_package_reads_is_declared proves nothing)."""
    src = '''
def f(config, self, loss_cfg):
    r = config.rollout
    p, s = self.config.credit.prover, config.judge
    return (r.temperature, r.nope_a, config.loss.nope_b, p.nope_c, s.get("nope_d", 0), loss_cfg.nope_e,
            getattr(config.train, "nope_f", None), default_config().sft.nope_g, c.tokens, r.top_p,
            config.env.kwargs.anything, config.judge.openai.to_dict())
'''
    assert [f for _, f in undeclared_reads(src)] == [
        "rollout.nope_a", "loss.nope_b", "credit.prover.nope_c", "judge.nope_d", "loss.nope_e",
        "train.nope_f", "sft.nope_g"]
    assert [f for _, f in undeclared_reads("def f(self):\n    return self.config.prover.nope, config_get("
                                           "self.config, 'nope2')\n", PACKAGE_SECTIONS["credit"])] == [
        "credit.prover.nope", "credit.nope2"]
    keys = ("def f(section):\n    keys = ('model', 'nope3')\n    sub = config_get(section, 'openai')\n"
            "    return {k: config_get(sub, k) for k in keys}\n")
    assert [f for _, f in undeclared_reads(keys, PACKAGE_SECTIONS["judges"])] == ["judge.openai.nope3"]


def test_contrastive_default_is_the_judges():
    from prover_jax.judges.contrastive import IGNORED_FIELDS
    assert tuple(default_config().judge.contrastive.ignore_fields) == IGNORED_FIELDS


# -------------------------------------------------------------------------- (c) the shipped files

def _load(path):
    return importlib.machinery.SourceFileLoader(f"cfg_fields_{os.path.basename(path)[:-3]}", path).load_module()


def _shipped():
    """(name, config) of every shipped config file, each qwen3_5.py variant included."""
    for path in CONFIGS:
        module = _load(path)
        name = os.path.basename(path)
        if name == "qwen3_5.py":
            for size, pod in module.LAYOUTS:
                for bench in module.BENCHMARKS:
                    yield f"{name}:{size},{bench},{pod}", module.get_config(f"{size},{bench},{pod}")
            yield f"{name}:2B,alfworld,v6e-8,9B", module.get_config("2B,alfworld,v6e-8,9B")
        elif hasattr(module, "ARGS"):
            for arg in module.ARGS:
                yield f"{name}:{arg}", module.get_config(arg)
        else:
            yield name, module.get_config()


def test_shipped_configs_set_only_declared_fields():
    want = set(leaves(default_config()))
    assert len(CONFIGS) >= 3
    for name, c in _shipped():
        have = {k for k in leaves(c) if not any(k.startswith(f + ".") for f in FREE)}
        assert have == want, (name, sorted(have - want), sorted(want - have))


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_every_field_a_config_file_sets_has_a_comment(path):
    source = open(path).read()
    src = Source(source)
    bare = [f"{os.path.basename(path)}:{s.lineno} {f}" for f, s in assignments(source) if src.bare(s)]
    assert not bare, "fields set without a comment:\n" + "\n".join(bare)

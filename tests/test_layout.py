"""The layout keeps its promises (README "Layout"): data flows one way between packages, no module
imports itself back (not even through an import inside a function), library modules never import the
command-line programs, and no file grows past ~400 lines. Read from the source with `ast`; nothing runs."""

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "prover_jax")
MAX_LINES = 400

# package -> the packages its library modules may import (task -> rollout -> propose/verify -> credit ->
# update -> checkpoint/export; below them the model, its sharding and the engine). Programs (`is_program`:
# */cli.py, __main__.py, ENTRY_POINTS) sit on top and may import anything.
ALLOWED = {
    "registry": set(),
    "tpu_env": set(),
    "prover_jax": {"tpu_env"},  # the package itself: libtpu's environment before anything starts JAX
    "sharding": set(),
    "models": {"sharding", "registry"},  # registry: the model-family table (models.families)
    "convert": {"models", "sharding"},
    "distributed": {"sharding"},
    "sampling": {"models", "sharding", "convert"},  # convert: reading checkpoints (sampling.loader)
    "envs": {"registry"},
    "rollout": {"envs", "sampling", "models"},
    "judges": {"registry", "envs", "rollout"},  # envs: the oracle judge reads the env's pivot rules
    "credit": {"registry", "envs", "rollout", "judges", "sampling"},
    "serving": {"models", "sampling", "sharding"},
    "training": {"registry", "sharding", "models", "convert", "distributed", "sampling", "envs", "rollout",
                 "judges", "credit", "serving"},
    "aot": {"training", "sampling", "models", "sharding", "distributed"},
    "compare": {"training", "credit", "judges"},
    "demo": {"training"},
}
# command-line programs besides */cli.py: wiring, not library code (python -m ..., console scripts)
ENTRY_POINTS: set[str] = set()


def modules():
    """{dotted module name: path} of every module under prover_jax/."""
    out = {}
    for root, _, files in os.walk(PKG):
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(root, f)
                rel = os.path.relpath(path, ROOT)[:-3].split(os.sep)
                out[".".join(rel[:-1] if rel[-1] == "__init__" else rel)] = path
    return out


def imports(path, *, top_level_only: bool):
    """prover_jax modules `path` imports (all of them, or only those run at import time: not inside
    functions or `if TYPE_CHECKING:`)."""
    tree = ast.parse(open(path).read())
    found = []

    def visit(node, top):
        for child in ast.iter_child_nodes(node):
            inner = top
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                inner = False
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                inner = False
            if inner or not top_level_only:
                if isinstance(child, ast.Import):
                    found.extend(a.name for a in child.names if a.name.startswith("prover_jax"))
                elif isinstance(child, ast.ImportFrom) and child.module and child.module.startswith("prover_jax"):
                    found.extend(f"{child.module}.{a.name}" for a in child.names)
            visit(child, inner)

    visit(tree, True)
    return found


def resolve(name, known):
    """The module an imported name lives in: the longest known prefix."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name


def package_of(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_data_flows_one_way_between_packages():
    mods = modules()
    assert set(ALLOWED) >= {package_of(m) for m in mods if m != "prover_jax"}, "a package missing from ALLOWED"
    bad = []
    for mod, path in mods.items():
        if is_program(path):
            continue
        src = package_of(mod)
        for name in imports(path, top_level_only=False):
            dst = package_of(resolve(name, mods))
            if dst != src and dst != "prover_jax" and dst not in ALLOWED.get(src, set()):
                bad.append(f"{os.path.relpath(path, ROOT)} imports {name} ({src} -> {dst})")
    assert not bad, "\n".join(bad)


def import_graph(*, top_level_only: bool) -> dict[str, set[str]]:
    """module -> the prover_jax modules importing it runs (its imports, and the packages above them)."""
    mods = modules()
    graph = {m: {resolve(n, mods) for n in imports(p, top_level_only=top_level_only)} - {m, "prover_jax", ""}
             for m, p in mods.items()}
    for m in list(graph):  # importing a.b.c runs a/__init__ and a/b/__init__ first
        parents = {m.rsplit(".", k)[0] for k in range(1, m.count("."))}
        graph[m] |= {p for p in parents if p in graph and p != "prover_jax"} - {m}
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[str]:
    """'a -> b -> a' for a cycle closed by each back edge of a depth-first walk (the package
    re-export pattern of `_package_init_cycle` excepted); [] when the graph is acyclic."""
    cycles, state = [], {}

    def dfs(node, stack):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                if not _package_init_cycle(cycle):
                    cycles.append(" -> ".join(cycle))
            elif nxt not in state:
                dfs(nxt, stack)
        stack.pop()
        state[node] = 2

    for m in sorted(graph):
        if m not in state:
            dfs(m, [])
    return cycles


def test_no_import_cycles():
    cycles = find_cycles(import_graph(top_level_only=True))
    assert not cycles, "\n".join(cycles)


def test_no_import_cycles_with_lazy_imports():
    """Counting imports inside functions too: a lazy import that closes a cycle only hides it."""
    cycles = find_cycles(import_graph(top_level_only=False))
    assert not cycles, "import cycles (lazy imports counted):\n" + "\n".join(cycles)


def is_program(path: str) -> bool:
    """A command-line program: a cli.py / __main__.py, or one of ENTRY_POINTS."""
    return os.path.basename(path) in ("cli.py", "__main__.py") or os.path.relpath(path, ROOT) in ENTRY_POINTS


def test_library_modules_do_not_import_programs():
    """Programs sit on top: what a library module needs from one belongs in a library module."""
    mods = modules()
    bad = [f"{os.path.relpath(path, ROOT)} imports {name}"
           for mod, path in mods.items() if not is_program(path)
           for name in imports(path, top_level_only=False)
           if resolve(name, mods) in mods and is_program(mods[resolve(name, mods)])]
    assert not bad, "library modules importing command-line programs:\n" + "\n".join(bad)


def _package_init_cycle(cycle):
    """pkg/__init__ importing its own submodule, which imports a sibling through the package: the
    usual re-export pattern, resolved by Python because the package object exists first."""
    return any(b.startswith(a + ".") for a, b in zip(cycle, cycle[1:])) and all(
        package_of(m) == package_of(cycle[0]) for m in cycle)


@pytest.mark.parametrize("folder", ["prover_jax", "bench", "tests", "launch"])
def test_no_file_over_400_lines(folder):
    long = []
    for root, _, files in os.walk(os.path.join(ROOT, folder)):
        for f in files:
            if f.endswith((".py", ".sh")):
                path = os.path.join(root, f)
                n = sum(1 for _ in open(path, encoding="utf-8"))
                if n > MAX_LINES:
                    long.append(f"{os.path.relpath(path, ROOT)}: {n} lines")
    assert not long, "split these files along a real seam:\n" + "\n".join(long)


def test_the_checks_can_fail(tmp_path):
    """The import reader sees what a violation would look like (lazy imports count for the flow)."""
    p = tmp_path / "m.py"
    p.write_text("import os\nfrom prover_jax.training import trainer\n\ndef f():\n"
                 "    from prover_jax.credit import grpo\n\nif TYPE_CHECKING:\n    import prover_jax.judges\n")
    assert imports(str(p), top_level_only=True) == ["prover_jax.training.trainer"]
    assert imports(str(p), top_level_only=False) == ["prover_jax.training.trainer", "prover_jax.credit.grpo",
                                                     "prover_jax.judges"]
    assert package_of(resolve("prover_jax.envs.household.env.Household", modules())) == "envs"
    assert find_cycles({"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}}) == ["p.a -> p.b -> p.c -> p.a"]
    assert find_cycles({"p.a": {"p.b"}, "p.b": set()}) == []
    assert is_program(os.path.join(PKG, "serving", "cli.py")) and not is_program(os.path.join(PKG, "serving", "app.py"))

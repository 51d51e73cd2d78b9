"""Every distribution the package imports is declared in setup.py (install_requires or an extra): a module
that imports something only another package happens to bring fails here."""

import ast
import importlib.metadata
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def declared() -> set[str]:
    """Normalised distribution names of setup.py's install_requires and extras_require."""
    tree = ast.parse(open(os.path.join(ROOT, "setup.py")).read())
    specs = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "install_requires":
            specs += [c.value for c in node.value.elts]
        if isinstance(node, ast.keyword) and node.arg == "extras_require":
            specs += [c.value for v in node.value.values for c in v.elts]
    return {normalise(re.split(r"[\[<>=!~ ;]", spec)[0]) for spec in specs}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_modules() -> dict[str, str]:
    """Top-level module names imported anywhere under prover_jax/ (absolute imports) -> a file importing it."""
    out = {}
    for folder, _, files in os.walk(os.path.join(ROOT, "prover_jax")):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                for node in ast.walk(ast.parse(open(path).read())):
                    if isinstance(node, ast.Import):
                        names = [a.name for a in node.names]
                    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                        names = [node.module]
                    else:
                        continue
                    for n in names:
                        out.setdefault(n.split(".")[0], os.path.relpath(path, ROOT))
    return out


def test_every_imported_distribution_is_declared():
    dists = importlib.metadata.packages_distributions()
    want = declared()
    missing = []
    for module, where in sorted(imported_modules().items()):
        if module in sys.stdlib_module_names or module == "prover_jax" or module not in dists:
            continue  # the standard library, the package itself, or not installed in this lane (checked where it is)
        names = {normalise(d) for d in dists[module]}
        if not names & want:
            missing.append(f"{module} (distribution {sorted(names)}, imported in {where})")
    assert not missing, "imported but not declared in setup.py: " + "; ".join(missing)

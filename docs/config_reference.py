"""Renders docs/config-reference.md: every section and field of `prover_jax.training.config.default_config()`
(each credit method's own section included) as markdown tables of field, default and meaning.

    python docs/config_reference.py > docs/config-reference.md   # regenerate
    python docs/config_reference.py --check                       # exit 1 when the file differs

The meaning is the field's comment in the source, read with `prover_jax.training.config_source` (as
tests/training/test_config_fields.py reads it to check that every field has one): the trailing `# comment` of its
assignment, the comment lines right above it, and comment lines right below a trailing comment that go on
with it (they start in lower case or with a symbol, e.g. `# | dpa ...`). A comment block above a section
(`c.model = ConfigDict()`) introduces the section. Defaults are the values `default_config()` returns.
"""

from __future__ import annotations

import ast
import inspect
import os
import re
import sys
import textwrap

import ml_collections

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from prover_jax.training.config_source import Source, assignments, leaves  # noqa: E402
OUT = os.path.join(ROOT, "docs", "config-reference.md")


def continues(text: str) -> bool:
    """Whether a comment line goes on with the comment above it (lower case or a symbol first)."""
    return bool(text) and not text[0].isupper()


def described(source: str, root: str, prefix: str = "") -> dict[str, str]:
    """Dotted path -> its comment, for the first assignment of each path in `source`."""
    src = Source(source)
    stmts = assignments(source, root)
    out: dict[str, str] = {}
    taken: set[int] = set()  # comment lines already given to the statement above them
    for i, (path, stmt) in enumerate(stmts):
        trailing = src.trailing(stmt)
        above = [n for n in src.block_above(stmt.lineno) if n not in taken]
        below = src.block_below(stmt.end_lineno)
        nxt = stmts[i + 1][1] if i + 1 < len(stmts) else None
        if trailing and below and nxt is not None and nxt.lineno == below[-1] + 1 and src.trailing(nxt) \
                and continues(src.comments[below[0]]):
            trailing = " ".join([trailing, src.text(below)])  # the comment goes on below the line
            taken.update(below)
        parts = [prose(p) for p in (src.text(above), trailing) if p]
        if prefix + path not in out:
            out[prefix + path] = "<br>".join(parts)  # a note above the field, then its own comment
    return out


def value(v: object) -> str:
    """A default as one would write it in a config file."""
    if isinstance(v, ml_collections.ConfigDict):
        return "{}" if not len(v) else repr(v.to_dict())
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, tuple):
        items = [value(x) for x in v]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if isinstance(v, list):
        return "[" + ", ".join(value(x) for x in v) + "]"
    return repr(v)


def prose(text: str) -> str:
    """A comment as markdown text: `<name>` outside code spans escaped (else it would read as an HTML tag)."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # outside code spans
        parts[i] = re.sub(r"<(?=[A-Za-z/!])", "&lt;", parts[i])
    return "`".join(parts)


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def declarations():
    """(source file, source, root, prefix, intro) of config.py and of each credit method's
    `default_config` (its section config.credit.<name>)."""
    from prover_jax.credit.base import CreditMethod, credit_class, credit_names
    from prover_jax.training import config as config_lib

    path = config_lib.__file__
    tree = ast.parse(open(path).read())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "default_config")
    source = "\n".join(open(path).read().splitlines()[: fn.end_lineno])  # line numbers kept
    out = [(path, source, "c", "", "")]
    for name in credit_names():
        method = credit_class(name).default_config
        if method.__func__ is CreditMethod.default_config.__func__:
            continue
        doc = inspect.getdoc(method) or ""
        if doc.rstrip(".") == f"config.credit.{name}":
            doc = ""  # the docstring only names the section
        out.append((inspect.getsourcefile(method), textwrap.dedent(inspect.getsource(method)), "s",
                    f"credit.{name}.", doc))
    return out


def render() -> str:
    from prover_jax.training.config import default_config

    config = default_config()
    fields = leaves(config)
    comments: dict[str, str] = {}
    where: dict[str, str] = {}  # section -> the file that declares it (credit methods)
    intros: dict[str, str] = {}
    order: list[str] = []  # every declared path (leaves and sections), in source order
    for path, source, root, prefix, doc in declarations():
        rel = os.path.relpath(path, ROOT)
        found = described(source, root, prefix)
        if prefix:
            section = prefix[:-1]
            where[section] = rel
            intros[section] = prose(doc)
            order.append(section)
        for p, text in found.items():
            if p not in comments:
                comments[p] = text
                order.append(p)
    # sections: every ConfigDict node that is not a leaf, each followed by its own sections
    nodes = [p for p in dict.fromkeys(order)
             if p not in fields and isinstance(_node(config, p), ml_collections.ConfigDict)]

    def tree(parent: str) -> list[str]:
        kids = [p for p in nodes if p.rpartition(".")[0] == parent]
        return [x for k in kids for x in [k] + tree(k)]

    sections = tree("")
    missing = sorted(set(fields) - set(comments))
    if missing:
        raise SystemExit(f"fields with no declaration found in the source: {missing}")

    out = [
        "# Config reference",
        "",
        "<!-- Generated by `python docs/config_reference.py > docs/config-reference.md`; do not edit by hand."
        " tests/test_docs.py checks that it is current. -->",
        "",
        "Every field of `prover_jax.training.config.default_config()`, section by section, with its default",
        "and the comment it carries in the source (`prover_jax/training/config.py`; a credit method's own",
        "section `credit.<name>` is declared in that method's `default_config`, next to its maths). Config",
        "files (`configs/`, [configs/README.md](../configs/README.md)) start from these defaults, and any field",
        "can be set on the command line:",
        "",
        "```bash",
        "prover-train --config=configs/learn.py --workdir=W --config.rollout.group_size=16 --config.credit.method=grpo",
        "```",
        "",
        "Sections:",
    ]
    top = [s for s in sections if "." not in s]
    out.append("[top level](#top-level), " + ", ".join(f"[{s}](#{s.replace('.', '')})" for s in top) + ".")

    def table(paths: list[str]) -> list[str]:
        rows = ["| field | default | meaning |", "|---|---|---|"]
        for p in paths:
            rows.append(f"| `{p}` | `{cell(value(fields[p]))}` | {cell(comments[p])} |")
        return rows

    def section_rows(section: str) -> list[str]:
        return [p for p in order if p in fields and p.rpartition(".")[0] == section]

    out += ["", "## top level", ""] + table(section_rows(""))
    for s in sections:
        heading = "##" if "." not in s else "###"
        out += ["", f"{heading} {s}", ""]
        intro = intros.get(s) or comments.get(s, "")
        if s in where:
            intro = (intro + " " if intro else "") + f"Declared in `{where[s]}`."
        if intro:
            out += [intro.replace("<br>", " "), ""]
        rows = section_rows(s)
        if rows:
            out += table(rows)
        else:
            out.append("(no fields of its own)")
    return "\n".join(out) + "\n"


def _node(config: ml_collections.ConfigDict, path: str):
    node = config
    for key in path.split("."):
        node = node[key]
    return node


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv[1:]:
        have = open(OUT).read() if os.path.exists(OUT) else ""
        if have != text:
            print(f"{os.path.relpath(OUT, ROOT)} is out of date: python docs/config_reference.py > "
                  "docs/config-reference.md", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Config fields as written in source: where each `root.<field> = ...` is assigned and the comments
around it. docs/config_reference.py renders the reference from them; tests/training/test_config_fields.py
checks that every field is declared with a comment.

    src = Source(text)
    for path, stmt in assignments(text, "c"):      # ("rollout.group_size", <ast.Assign>), in order
        src.trailing(stmt), src.block_above(stmt.lineno), src.bare(stmt)
    leaves(default_config())                        # {"rollout.group_size": 8, ...}
"""

from __future__ import annotations

import ast
import io
import tokenize

import ml_collections

FREE = ("env.kwargs",)  # free-form sections: any key (the env family's keyword arguments), one leaf


class Source:
    """The comments of one source text, by line (1-based)."""

    def __init__(self, source: str):
        self.lines = source.splitlines()
        self.comments: dict[int, str] = {}  # line -> comment text (without '#')
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                self.comments[tok.start[0]] = tok.string.lstrip("#").strip()
        self.only = {n for n in self.comments if self.lines[n - 1].lstrip().startswith("#")}  # comment-only lines

    def block_above(self, line: int) -> list[int]:
        """The comment-only lines right above `line` (no blank line between), top first."""
        out = []
        n = line - 1
        while n in self.only:
            out.append(n)
            n -= 1
        return out[::-1]

    def block_below(self, line: int) -> list[int]:
        """The comment-only lines right below `line`, top first."""
        out = []
        n = line + 1
        while n in self.only:
            out.append(n)
            n += 1
        return out

    def trailing(self, stmt: ast.stmt) -> str:
        """The comments at the ends of the statement's own lines."""
        return " ".join(self.comments[n] for n in range(stmt.lineno, stmt.end_lineno + 1)
                        if n in self.comments and n not in self.only)

    def text(self, lines: list[int]) -> str:
        return " ".join(self.comments[n] for n in lines)

    def bare(self, stmt: ast.stmt) -> bool:
        """No comment on the statement's lines nor a comment line right above it."""
        return not (set(self.comments) & set(range(stmt.lineno, stmt.end_lineno + 1))
                    or stmt.lineno - 1 in self.only)


def chain(node: ast.AST) -> list[str] | None:
    """`c.a.b` -> ["c", "a", "b"]; None unless the chain is rooted at a name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id] + parts[::-1]


def assignments(source: str, root: str = "c") -> list[tuple[str, ast.stmt]]:
    """(dotted field, statement) of every assignment to `root.<field>` in `source`, in source order."""
    out = []
    for stmt in ast.walk(ast.parse(source)):
        if isinstance(stmt, ast.Assign):
            targets = [e for t in stmt.targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
        elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
            targets = [stmt.target]
        else:
            continue
        for t in targets:
            parts = chain(t)
            if parts and parts[0] == root and len(parts) > 1:
                out.append((".".join(parts[1:]), stmt))
    return sorted(out, key=lambda x: x[1].lineno)


def leaves(d: ml_collections.ConfigDict, prefix: str = "") -> dict[str, object]:
    """Dotted path -> value of every leaf (an empty ConfigDict and a FREE section are leaves)."""
    out = {}
    for k, v in d.items():
        path = f"{prefix}{k}"
        if isinstance(v, ml_collections.ConfigDict) and len(v) and path not in FREE:
            out.update(leaves(v, path + "."))
        else:
            out[path] = v
    return out

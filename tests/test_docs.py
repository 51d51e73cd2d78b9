"""The docs stay honest: every relative link in README.md and docs/*.md points at a file or folder of
this repository (and at a heading there, when it names one), every repository path they quote in
backticks exists, and docs/config-reference.md is what docs/config_reference.py renders from the
source today. Read from the files alone; nothing is trained or compiled."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
EXTENSIONS = (".py", ".md", ".sh", ".png", ".svg", ".json", ".jsonl", ".txt", ".toml", ".cfg", ".ini", ".yaml",
              ".yml", ".jinja", ".csv")
# top-level folders a quoted path may start with (run outputs and build folders are not the repo's)
NOT_REPO = {"runs", "build", "dist", "tmp"}
TOP = sorted(d for d in os.listdir(ROOT) if os.path.isdir(os.path.join(ROOT, d)) and not d.startswith(".")
             and d not in NOT_REPO and not d.endswith(".egg-info") and not d.startswith("workdir"))
PACKAGE = sorted(d for d in os.listdir(os.path.join(ROOT, "prover_jax"))
                 if os.path.isdir(os.path.join(ROOT, "prover_jax", d)) and not d.startswith("__"))

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SPAN = re.compile(r"`([^`\n]+)`")
# a path that starts at a top-level folder, anywhere in code (a command's argument included)
ROOTED = re.compile(r"(?<![\w./~$-])((?:%s)/[\w./{},*+-]*)" % "|".join(map(re.escape, TOP)))


# ------------------------------------------------------------------------------------------- helpers

def split_code(text: str) -> tuple[str, list[str]]:
    """(the prose with fenced blocks and code spans blanked, the code: each fenced block and span)."""
    code = [m.group(0) for m in FENCE.finditer(text)]
    prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    code += SPAN.findall(prose)
    prose = SPAN.sub(lambda m: " " * len(m.group(0)), prose)
    return prose, code


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation but - and _ removed,
    spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().rstrip("#").strip())
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: str) -> set[str]:
    """Every heading anchor of a markdown file (repeated headings get -1, -2, ...)."""
    text = FENCE.sub("", open(path, encoding="utf-8").read())
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^#{1,6}[ \t]+(.+)$", text, re.M):
        s = slug(m.group(1))
        out.add(s if s not in seen else f"{s}-{seen[s]}")
        seen[s] = seen.get(s, 0) + 1
    return out


def expand(pattern: str) -> list[str]:
    """`a/{b,c}_*` -> ["a/b_*", "a/c_*"]."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    return [x for alt in m.group(1).split(",") for x in expand(pattern[:m.start()] + alt + pattern[m.end():])]


def exists(path: str) -> bool:
    """A path (or glob) of the repository, from its root or, for package modules, from prover_jax/."""
    for base in (ROOT, os.path.join(ROOT, "prover_jax")):
        candidates = [os.path.join(base, p) for p in expand(path)]
        if all(glob.glob(c) if any(ch in c for ch in "*?[") else os.path.exists(c) for c in candidates):
            return True
    return False


def clean(token: str) -> str | None:
    """The repository path a quoted token names, or None for what is not one (a placeholder, a
    config argument's tail, an output of a run)."""
    token = token.strip().rstrip(".,;)'\"")
    m = re.match(r"(.*?\.(?:%s))(?=[:\[])" % "|".join(e[1:] for e in EXTENSIONS), token)
    if m:  # configs/qwen3_5.py:2B,alfworld or configs/demo_levers.py[:pairs]: the file
        token = m.group(1)
    if not token or any(ch in token for ch in "<>$") or "..." in token or "://" in token:
        return None
    return token


def quoted_paths(code: list[str]) -> set[str]:
    """Repository paths in code: any path rooted at a top-level folder, and a lone token such as
    `credit/common.py` (a module under prover_jax/) that ends in a known extension."""
    out = set()
    for block in code:
        for m in ROOTED.finditer(block):
            token = clean(m.group(1))
            if token and token.rstrip("/") not in TOP:
                out.add(token)
        token = block.strip()
        if "\n" not in token and " " not in token and "/" in token:
            first = token.split("/", 1)[0]
            name = clean(token)
            if name and first in PACKAGE and name.endswith(EXTENSIONS):
                out.add(name)
    return out


def problems(text: str, path: str) -> list[str]:
    """What in one markdown text does not exist: links (file, then heading) and quoted paths."""
    prose, code = split_code(text)
    here = os.path.dirname(path)
    bad = []
    for m in LINK.finditer(prose):
        target = m.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(here, file)) if file else path
        if not os.path.exists(dest):
            bad.append(f"link ({target}): no {os.path.relpath(dest, ROOT)}")
        elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
            bad.append(f"link ({target}): no heading #{anchor} in {os.path.relpath(dest, ROOT)}")
    for token in sorted(quoted_paths(code)):
        if not exists(token):
            bad.append(f"path `{token}`: not in the repository")
    return bad


# ------------------------------------------------------------------------------------------------ tests

@pytest.mark.parametrize("doc", DOCS, ids=lambda p: os.path.relpath(p, ROOT))
def test_links_and_paths_exist(doc):
    bad = problems(open(doc, encoding="utf-8").read(), doc)
    assert not bad, f"{os.path.relpath(doc, ROOT)}:\n" + "\n".join(bad)


def test_the_check_sees_broken_links_and_paths():
    """Broken links, headings and paths are caught, placeholders and run outputs are not (else the test
    above proves nothing)."""
    text = ("[a](docs/nope.md) [b](README.md#no-such-heading) [c](README.md#layout) [d](https://x.org/y) "
            "`bench/nope.py` `credit/nope.py` `configs/learn.py:long` `W/config.json` `runs/demo/progress.png` "
            "`prover_jax/credit/<name>.py` `credit/extra_policy_tokens` `bench/results/compare_demo*`\n"
            "```bash\npython bench/also_nope.py --config=configs/qwen3_5.py:2B,alfworld\n```\n")
    assert problems(text, os.path.join(ROOT, "README.md")) == [
        f"link (docs/nope.md): no {os.path.join('docs', 'nope.md')}",
        "link (README.md#no-such-heading): no heading #no-such-heading in README.md",
        "path `bench/also_nope.py`: not in the repository",
        "path `bench/nope.py`: not in the repository",
        "path `credit/nope.py`: not in the repository",
    ]
    assert slug("Compiling for a TPU slice without one (`prover-aot`)") == \
        "compiling-for-a-tpu-slice-without-one-prover-aot"


def test_config_reference_is_current():
    """Rendered in a fresh interpreter: the package's own credit methods only (a test in this process may
    have registered one of its own)."""
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "config_reference.py"), "--check"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, ("docs/config-reference.md is out of date: python docs/config_reference.py > "
                                  "docs/config-reference.md\n" + proc.stdout[-2000:] + proc.stderr[-2000:])

"""Bytes accessed by a compiled program, loops counted per iteration, from its HLO text.

XLA's `cost_analysis()["bytes accessed"]` counts a while loop's body once. This walks the optimised
HLO the same way (each top-level instruction reads its operands and writes its output; a fusion is
one instruction, reading only the slices of an operand it only slices and writing only the update of
an in-place dynamic-update-slice; an asynchronous copy moves its array once, so a prefetch into VMEM
reads HBM once; parameters, constants, tuples and bitcasts are free) but multiplies
a while body by its trip count, read from the loop condition (`compare(counter, constant(N)), direction=LT`, the form
XLA's loop passes leave; a counter starting elsewhere than 0 or another form counts as 1 trip and is
reported in `unknown_trip_counts`). A conditional counts its costliest branch.

    report = bytes_accessed(compiled.as_text())   # {"bytes", "collective_bytes", "loops", "unknown_trip_counts"}

collective_bytes: what the collectives move per device (an all-gather's or all-reduce's output, a
collective-permute's operand), loops times their trip counts: the interconnect (ICI) term of the
roofline.

Arrays the compiler placed in VMEM (memory space S(1)) are left out by default: the roofline divides
by HBM bandwidth. Sizes are padded to the layout's tiles, as XLA:TPU stores them.
"""

from __future__ import annotations

import re

_DTYPE_BYTES = {"pred": 1, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1, "bf16": 2,
                "f16": 2, "s16": 2, "u16": 2, "f32": 4, "s32": 4, "u32": 4, "f64": 8, "s64": 8, "u64": 8,
                "c64": 8, "c128": 16}
_ARRAY = re.compile(r"\b([a-z]+[0-9]*[a-z0-9]*)\[([0-9,]*)\](\{[^}]*\})?")
_HEADER = re.compile(r"^(?:ENTRY )?%(\S+) \(.*\) -> .*\{\s*$")
_FREE = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all", "partition-id",
         "replica-id", "opt-barrier"}


def _type_bytes(text: str, hbm_only: bool = False) -> float:
    """Bytes of the arrays in an HLO type, each padded to its layout's first tile (T(a,b) rounds the
    two most-minor dimensions up to a, b), as the TPU stores them; hbm_only skips arrays placed in
    on-chip memory (layout memory space S(1), VMEM)."""
    total = 0.0
    for dtype, dims, layout in _ARRAY.findall(text):
        if dtype not in _DTYPE_BYTES or (hbm_only and "S(1)" in (layout or "")):
            continue
        shape = [int(d) for d in dims.split(",") if d]
        m = re.match(r"\{([0-9,]*)(?::.*?T\(([0-9,]+)\))?", layout or "")
        if m and m.group(2) and m.group(1):
            minor_to_major = [int(x) for x in m.group(1).split(",")]
            tile = [int(x) for x in m.group(2).split(",")]
            for dim, t in zip(minor_to_major, reversed(tile)):
                shape[dim] = -(-shape[dim] // t) * t
        n = 1
        for d in shape:
            n *= d
        total += n * _DTYPE_BYTES[dtype]
    return total


def _split_type(rest: str) -> tuple[str, str]:
    """'TYPE opcode(...)...' -> (TYPE, 'opcode(...)...'); TYPE may be a parenthesised tuple."""
    if rest.startswith("("):
        depth = 0
        for i, ch in enumerate(rest):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                return rest[:i + 1], rest[i + 1:].lstrip()
    i = rest.index(" ")
    return rest[:i], rest[i + 1:]


def _split_tuple(typ: str) -> list[str]:
    """'(A, B{...}, C)' -> ['A', 'B{...}', 'C'] (top-level elements of a tuple type)."""
    inner, parts, depth, cur = typ.strip()[1:-1], [], 0, ""
    for ch in inner:
        depth += ch in "({["
        depth -= ch in ")}]"
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return parts + [cur.strip()] if cur.strip() else parts


def _parse(text: str):
    comps, current, entry = {}, None, None
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m:
            current = comps.setdefault(m.group(1), [])
            if line.startswith("ENTRY"):
                entry = m.group(1)
            continue
        if line.rstrip() == "}":  # (attribute text may span lines and start with "}}")
            current = None
            continue
        if current is None:
            continue
        s = line.strip()
        if s.startswith("ROOT "):
            s = s[5:]
        if not s.startswith("%") or " = " not in s:
            continue
        name, rest = s[1:].split(" = ", 1)
        typ, rest = _split_type(rest)
        op = rest.split("(", 1)[0]
        # operands: up to the matching close paren of the opcode's argument list
        depth, args = 0, ""
        for i, ch in enumerate(rest[len(op):]):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                args = rest[len(op) + 1:len(op) + i]
                attrs = rest[len(op) + i + 1:]
                break
        else:
            attrs = ""
        operands = re.findall(r"%([\w.\-]+)", args)
        called = dict(re.findall(r"\b(body|condition|calls|to_apply)=%([\w.\-]+)", attrs))
        branches = re.findall(r"%([\w.\-]+)", attrs.split("branch_computations={", 1)[1].split("}", 1)[0]) \
            if "branch_computations={" in attrs else []
        current.append(dict(name=name, type=typ, op=op, operands=operands, called=called, branches=branches,
                            line=s, root=line.strip().startswith("ROOT ")))
    return comps, entry


def _trip_count(cond: list[dict]) -> int | None:
    consts = {}
    for ins in cond:
        m = re.search(r"constant\((-?\d+)\)", ins["line"])
        if ins["op"] == "constant" and m and ins["type"].startswith(("s32[]", "s64[]", "u32[]")):
            consts[ins["name"]] = int(m.group(1))
    for ins in cond:
        if ins["op"] == "compare" and "direction=LT" in ins["line"]:
            for o in ins["operands"]:
                if o in consts:
                    return consts[o]
    return None


_SLICING = {"slice", "dynamic-slice", "gather"}
# collectives and what they move per device: the output (all-gather, all-reduce, all-to-all,
# reduce-scatter) or the operand sent (collective-permute-start).
_COLLECTIVES = {"all-gather", "all-gather-start", "all-reduce", "all-reduce-start", "reduce-scatter",
                "all-to-all", "collective-permute", "collective-permute-start"}


def _param_names(fused: list[dict]) -> dict[int, str]:
    out = {}
    for f in fused:
        m = re.search(r"parameter\((\d+)\)", f["line"]) if f["op"] == "parameter" else None
        if m:
            out[int(m.group(1))] = f["name"]
    return out


def _sliced_bytes(fused: list[dict], pname: str, comps: dict, hbm_only: bool) -> float | None:
    """Bytes read of fused parameter `pname` when it is used only through slices (directly or through
    nested fusions that only slice it); None when some use reads it whole."""
    users = [f for f in fused if pname in f["operands"]]
    if not users:
        return None
    total = 0.0
    for u in users:
        if u["op"] in _SLICING and u["operands"][0] == pname and u["operands"].count(pname) == 1:
            total += _type_bytes(u["type"], hbm_only)
        elif u["op"] == "fusion" and u["called"].get("calls") in comps:
            inner = comps[u["called"]["calls"]]
            names = _param_names(inner)
            for i, o in enumerate(u["operands"]):
                if o != pname:
                    continue
                b = _sliced_bytes(inner, names[i], comps, hbm_only) if i in names else None
                if b is None:
                    return None
                total += b
        else:
            return None
    return total


def _fusion_bytes(ins: dict, fused: list[dict], types: dict, hbm_only: bool, comps: dict) -> float:
    """A fusion reads its operands and writes its output, except: an operand used only through
    slices (also inside nested fusions) reads just the slices, and a buffer updated in place (a
    dynamic-update-slice of a fused parameter) is neither read nor written whole: only its update
    is written."""
    params = _param_names(fused)
    ftypes = {f["name"]: f["type"] for f in fused}
    pnames = set(params.values())
    dus = [f for f in fused if f["op"] == "dynamic-update-slice" and len(f["operands"]) > 1
           and f["operands"][0] in pnames]
    in_place = {f["operands"][0] for f in dus}
    out = _type_bytes(ins["type"], hbm_only)
    out -= sum(_type_bytes(f["type"], hbm_only) - _type_bytes(ftypes.get(f["operands"][1], ""), hbm_only)
               for f in dus)
    total = max(out, 0.0)
    for i, o in enumerate(ins["operands"]):
        pname = params.get(i)
        if pname in in_place:
            continue
        if hbm_only and "S(1)" in types.get(o, ""):
            continue
        sliced = None if pname is None else _sliced_bytes(fused, pname, comps, hbm_only)
        total += _type_bytes(types.get(o, ""), hbm_only) if sliced is None else sliced
    return total


def _own_bytes(ins: dict, types: dict, comps: dict, hbm_only: bool) -> float:
    """HBM bytes one instruction that calls no computation reads and writes (the module docstring's
    rules)."""
    op = ins["op"]
    if op == "fusion" and ins["called"].get("calls") in comps:
        return _fusion_bytes(ins, comps[ins["called"]["calls"]], types, hbm_only, comps)
    if op == "dynamic-update-slice" and len(ins["operands"]) > 1:  # in place: the update only
        return 2 * _type_bytes(types.get(ins["operands"][1], ""), hbm_only)
    if op in _SLICING:  # reads what it returns
        return 2 * _type_bytes(ins["type"], hbm_only)
    if op in ("slice-start", "copy-start"):  # asynchronous: counted at the matching -done
        return 0.0
    if op == "slice-done":  # a copy between memories (e.g. an HBM prefetch into VMEM): read once
        return _type_bytes(ins["type"], False)
    if op == "copy-done" and ins["operands"]:  # moves the array once: its HBM side(s) of (dst, src)
        return sum(_type_bytes(t, hbm_only) for t in _split_tuple(types.get(ins["operands"][0], ""))[:2])
    return _type_bytes(ins["type"], hbm_only) + sum(_type_bytes(types.get(o, ""), hbm_only)
                                                    for o in ins["operands"])


def op_key(line: str, depth: int = 3) -> str:
    """The jax op an HLO instruction came from: the last `depth` parts of its metadata op_name
    (jit(...) scopes and [...] parameters dropped), else its opcode in parentheses."""
    m = re.search(r'op_name="([^"]*)"', line)
    if not m:
        rest = line.split(" = ", 1)[-1]
        return "(" + _split_type(rest)[1].split("(", 1)[0] + ")"
    name = re.sub(r"\[[^\]]*\]", "", re.sub(r"jit\([^)]*\)/", "", m.group(1)))
    return "/".join(name.split("/")[-depth:])


def bytes_accessed(text: str, hbm_only: bool = True, by_op: int = 0) -> dict:
    """{"bytes", "collective_bytes", "loops", "unknown_trip_counts"} of a compiled program's HLO text
    (per device); hbm_only (default) leaves out arrays the compiler placed in VMEM. by_op > 0 adds
    "by_op": the by_op largest [op_key, bytes] pairs (trip counts included; they sum to at most "bytes")."""
    from collections import Counter
    comps, entry = _parse(text)
    stats = {"loops": 0, "unknown_trip_counts": 0}
    memo: dict[str, tuple[float, float, Counter]] = {}

    def scaled(c: Counter, k: float) -> Counter:
        return Counter({key: k * v for key, v in c.items()})

    def costs(comp: str) -> tuple[float, float, Counter]:
        """(HBM bytes, bytes sent over the interconnect, HBM bytes by op_key) of a computation."""
        if comp in memo:
            return memo[comp]
        instrs = comps.get(comp, [])
        types = {i["name"]: i["type"] for i in instrs}
        total, ici, by = 0.0, 0.0, Counter()
        for ins in instrs:
            op = ins["op"]
            if op in _COLLECTIVES:
                ici += _type_bytes(ins["type"] if op != "collective-permute-start" else
                                   " ".join(types.get(o, "") for o in ins["operands"]), False)
            if op in _FREE:
                continue
            if op in ("while", "conditional", "call"):
                if op == "while":
                    stats["loops"] += 1
                    trips = _trip_count(comps.get(ins["called"].get("condition", ""), []))
                    if trips is None:
                        stats["unknown_trip_counts"] += 1
                        trips = 1
                    body, cond = costs(ins["called"].get("body", "")), costs(ins["called"].get("condition", ""))
                    sub = (trips * (body[0] + cond[0]), trips * body[1], scaled(body[2] + cond[2], trips))
                elif op == "conditional":  # its costliest branch
                    sub = max((costs(b) for b in ins["branches"]), default=(0.0, 0.0, Counter()),
                              key=lambda c: (c[0], c[1]))
                else:
                    sub = costs(ins["called"].get("to_apply", ins["called"].get("calls", "")))
                total, ici = total + sub[0], ici + sub[1]
                if by_op:
                    by.update(sub[2])
                continue
            b = _own_bytes(ins, types, comps, hbm_only)
            total += b
            if by_op and b:
                by[op_key(ins["line"])] += b
        memo[comp] = (total, ici, by)
        return memo[comp]

    out = costs(entry) if entry else (0.0, 0.0, Counter())
    report = dict(bytes=out[0], collective_bytes=out[1], **stats)
    if by_op:
        report["by_op"] = [[k, v] for k, v in out[2].most_common(by_op)]
    return report

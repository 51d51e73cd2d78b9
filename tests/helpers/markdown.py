"""Reading the markdown tables that prover-compare writes and the README quotes."""

import re


def md_table(text: str, start: int = 0) -> dict:
    """{method: {column: cell}} of the first table at or after line `start` of `text`, the columns named by
    its header row, a row named by the first `code` span of its first cell ("`critic` (oracle)" -> critic)."""
    lines = text.splitlines()[start:]
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(first, len(lines)) if not lines[i].startswith("|")), len(lines))
    cells = lambda line: [c.strip() for c in line.strip().strip("|").split("|")]  # noqa: E731
    table = lines[first:end]
    header = cells(table[0])
    assert set(table[1]) == set("|-") and all(len(cells(line)) == len(header) for line in table)
    return {re.match(r"`([^`]+)`", row[0]).group(1): dict(zip(header, row)) for row in map(cells, table[2:])}

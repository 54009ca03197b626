"""Count the collectives a compiled XLA program runs per step, loops included.

`compiled.as_text()` lists every computation once; a collective inside a `while` body (a
`lax.scan`: the pipeline's ticks, scanned layers) runs once per iteration. The counter walks the
call graph from ENTRY and multiplies each while body by its `known_trip_count`, so the totals
are per executed step, comparable with the cost model's per-step `collective_bytes()`.

Bytes are full-buffer bytes per device and call, the cost model's `Collective.buffer_bytes`
convention: the result for all-reduce and all-gather, result x group size (= the operand) for
reduce-scatter, the result (= what each device sends) for all-to-all; for collective-permute
the result times the fraction of devices that send (a `jnp.roll` over a sharded axis becomes a
shift and a wrap-around permute, each with only some devices sending), i.e. the mean bytes a
device sends.
"""

from __future__ import annotations

import re

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "collective_permute", "all_to_all")
_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "pred": 1, "s8": 1, "u8": 1}
_OP = re.compile(
    r"=\s*(.+?)\s+(all-reduce|all-gather|reduce-scatter|collective-permute|all-to-all)"
    r"(?:-start)?\("
)
_GROUPS = re.compile(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}")
_COMP = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s+\(.*\)\s*->\s*.*\{\s*$")
_WHILE = re.compile(r"\bwhile\(.*?body=%?([\w.\-]+)")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_CALLS = re.compile(r"\b(?:calls|to_apply|true_computation|false_computation)=%?([\w.\-]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")


def shape_bytes(text: str) -> int:
    total = 0
    for dt, dims in re.findall(r"\b(f32|bf16|f16|s32|u32|pred|s8|u8)\[([0-9,]*)\]", text):
        n = 1
        for d in filter(None, dims.split(",")):
            n *= int(d)
        total += n * _BYTES[dt]
    return total


def group_size(line: str) -> int:
    """Size of the replica group of a collective printed with mesh-style replica_groups."""
    m = _GROUPS.search(line)
    if not m:
        g = re.search(r"replica_groups=\{\{([0-9,]*)\}", line)
        return len(g.group(1).split(",")) if g else 1
    sizes = dict(re.findall(r"'(\w+)'=(\d+)", m.group(1)))
    n = 1
    for ax in re.findall(r"'(\w+)'", m.group(2)):
        n *= int(sizes[ax])
    return n


def _collective(line: str, n_devices: int) -> tuple[str, float] | None:
    m = _OP.search(line)
    if not m or "-done" in line.split("=", 1)[1][:60]:
        return None
    kind = m.group(2).replace("-", "_")
    nbytes: float = shape_bytes(m.group(1))
    if kind == "reduce_scatter":
        nbytes *= group_size(line)
    pairs = re.search(r"source_target_pairs=\{(.*?)\}\}", line)
    if kind == "collective_permute" and pairs:
        nbytes *= len(re.findall(r"\{\d+,\d+", pairs.group(0))) / n_devices
    return kind, nbytes


def _computations(hlo: str) -> tuple[dict[str, list[str]], str | None]:
    comps: dict[str, list[str]] = {}
    entry, name = None, None
    for line in hlo.splitlines():
        m = _COMP.match(line)
        if m:
            name = m.group(1)
            comps[name] = []
            if line.startswith("ENTRY"):
                entry = name
        elif line.startswith("}"):
            name = None
        elif name is not None:
            comps[name].append(line)
    return comps, entry


def hlo_collective_bytes(hlo: str, n_devices: int = 8, loops_only: bool = False) -> dict[str, float]:
    """Bytes per collective kind executed by one run of the program on `n_devices` devices
    (see module doc); `loops_only` counts only collectives inside while loops (a pipeline's
    ticks). Text without computation headers (hand-written lines) is one flat body."""
    comps, entry = _computations(hlo)
    if entry is None:
        comps, entry = {"main": hlo.splitlines()}, "main"
    memo: dict[str, dict[str, float]] = {}

    def total(name: str, depth: int = 0, in_loop: bool = False) -> dict[str, float]:
        key = f"{name}/{in_loop}"
        if key in memo:
            return memo[key]
        out = dict.fromkeys(KINDS, 0.0)
        for line in comps.get(name, []) if depth < 64 else []:
            c = _collective(line, n_devices)
            if c:
                if in_loop or not loops_only:
                    out[c[0]] += c[1]
                continue
            w = _WHILE.search(line)
            if w:
                trip = _TRIP.search(line)
                n = int(trip.group(1)) if trip else 1
                for k, v in total(w.group(1), depth + 1, True).items():
                    out[k] += n * v
                continue
            callees = _CALLS.findall(line)
            b = _BRANCHES.search(line)
            if b:  # conditional: at most one branch runs; count the largest
                branches = [total(x.strip().lstrip("%"), depth + 1, in_loop) for x in b.group(1).split(",")]
                best = max(branches, key=lambda d: sum(d.values()))
                for k, v in best.items():
                    out[k] += v
            for callee in callees:
                for k, v in total(callee, depth + 1, in_loop).items():
                    out[k] += v
        memo[key] = out
        return out

    return total(entry)

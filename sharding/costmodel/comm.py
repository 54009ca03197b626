"""Collectives: which ranks share a node, and what a ring collective costs over which link.

Ranks are placed tensor-parallel innermost, then context-, then data-parallel, then pipeline
(Megatron-LM's default order), so a TP group sits inside one node whenever tp <= devices_per_node;
an expert-parallel group is the innermost ep of the data-parallel ranks.
A collective over n ranks with g of them per node runs at the intra-node bandwidth if g = n, else
at the node's network share that its g members get, min(intra, g · inter_node_bw): every node
runs devices_per_node/g such groups at once and they share its NICs.
"""

from __future__ import annotations

import dataclasses
import enum
import math

from sharding.costmodel.hardware import Hardware


class CollectiveKind(enum.StrEnum):
    """`Collective.kind`, the keys of `StepEstimate.collective_bytes()` (the names of
    tests/hlo_collectives.py, which reads them from compiled HLO)."""

    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"  # a mixture of experts' token dispatch / combine over the ep ranks
    P2P = "p2p"  # a pipeline send/receive between neighbouring stages


class Link(enum.StrEnum):
    """`Collective.link`: the link a collective's slowest hop crosses."""

    INTRA = "intra"  # inside a node (NVLink / xGMI / ICI)
    INTER = "inter"  # over the network between nodes


# bytes on the wire per rank, as a multiple of the buffer size, for ring algorithms; an all-to-all
# (pairwise exchange: n - 1 steps, each rank keeps its own 1/n of the buffer) sends (n - 1)/n of it
_RING_FACTOR = {
    CollectiveKind.ALL_REDUCE: lambda n: 2 * (n - 1) / n,
    CollectiveKind.ALL_GATHER: lambda n: (n - 1) / n,
    CollectiveKind.REDUCE_SCATTER: lambda n: (n - 1) / n,
    CollectiveKind.ALL_TO_ALL: lambda n: (n - 1) / n,
}
_RING_STEPS = {
    CollectiveKind.ALL_REDUCE: lambda n: 2 * (n - 1),
    CollectiveKind.ALL_GATHER: lambda n: n - 1,
    CollectiveKind.REDUCE_SCATTER: lambda n: n - 1,
    CollectiveKind.ALL_TO_ALL: lambda n: n - 1,
}


@dataclasses.dataclass(frozen=True)
class Collective:
    """One kind of collective in a training step, summed over the step, per device.

    buffer_bytes: size of the full (unsharded) buffer of one call; count: calls per step;
    wire_bytes: bytes each rank sends per step; time_s: per step, before any overlap.
    """

    name: str
    kind: CollectiveKind  # all_reduce | all_gather | reduce_scatter | p2p
    group_size: int
    buffer_bytes: float
    count: float
    wire_bytes: float
    time_s: float
    link: Link  # intra | inter


def ranks_per_node(hw: Hardware, tp: int, dp: int, pp: int, cp: int = 1, ep: int = 1) -> dict[str, int]:
    """How many members of one TP / CP / DP / PP group share a node under tp < cp < dp < pp
    placement (Megatron-LM's order with context parallelism); `ep` (the innermost ep of the dp
    ranks): of an expert-parallel group, and of the expert-data group of the dp / ep ranks that
    hold the same experts (`ep_dp`)."""
    dpn = hw.devices_per_node
    g_tp = min(tp, dpn)
    g_cp = 1 if tp >= dpn else max(1, min(cp, dpn // tp))
    g_dp = 1 if tp * cp >= dpn else max(1, min(dp, dpn // (tp * cp)))
    g_pp = 1 if tp * cp * dp >= dpn else max(1, min(pp, dpn // (tp * cp * dp)))
    out = {"tp": g_tp, "cp": g_cp, "dp": g_dp, "pp": g_pp}
    if ep > 1:
        out.update(ep=min(ep, g_dp), ep_dp=max(1, g_dp // ep))
    return out


LinkEff = float | tuple[float, float]  # one fraction, or (intra-node, network)


def _effs(link_eff: LinkEff) -> tuple[float, float]:
    return link_eff if isinstance(link_eff, tuple) else (link_eff, link_eff)


def collective_time(
    kind: CollectiveKind, buffer_bytes: float, n: int, g: int, hw: Hardware, link_eff: LinkEff
) -> tuple[float, float, Link]:
    """(seconds, wire bytes per rank, link) of one ring collective of `buffer_bytes` over n ranks.

    Latency counts the ring's steps: inside a node at the intra-node latency; across nodes every
    one of the ring's steps (over all n ranks: NCCL's rings are flat) waits for its network hop,
    so each costs the network latency. `link_eff`: the fraction of the link's bandwidth reached,
    or (inside a node, over the network).
    """
    if n <= 1 or buffer_bytes <= 0:
        return 0.0, 0.0, Link.INTRA
    intra_eff, inter_eff = _effs(link_eff)
    wire = _RING_FACTOR[kind](n) * buffer_bytes
    if g >= n:
        bw, link = hw.intra_node_bw * intra_eff, Link.INTRA
        lat = _RING_STEPS[kind](n) * hw.intra_node_latency_s
    else:
        bw, link = min(hw.intra_node_bw * intra_eff, g * hw.inter_node_bw * inter_eff), Link.INTER
        lat = _RING_STEPS[kind](n) * hw.inter_node_latency_s
        if kind == CollectiveKind.ALL_REDUCE:
            # NCCL's double binary tree (NCCL 2.4+) reduces up and broadcasts down a tree of the
            # nodes: 2·⌈log2(nodes)⌉ network hops plus the ring inside each node; NCCL picks the
            # faster of ring and tree. All-gather and reduce-scatter have only the ring, whose
            # n − 1 hops make them latency-bound at hundreds to thousands of ranks.
            nodes = max(2, -(-n // max(g, 1)))
            tree = (
                2 * math.ceil(math.log2(nodes)) * hw.inter_node_latency_s
                + 2 * (max(g, 1) - 1) * hw.intra_node_latency_s
            )
            lat = min(lat, tree)
    return wire / bw + lat, wire, link


def p2p_time(
    nbytes: float, same_node: bool, hw: Hardware, link_eff: LinkEff, senders: int | None = None
) -> float:
    """One pipeline send/recv of `nbytes` between neighbouring stages. Across nodes, `senders`
    devices of the node send at once (None: all of them); they share the node's network
    bandwidth, each no faster than one adapter (`Hardware.nics_per_node`)."""
    if nbytes <= 0:
        return 0.0
    intra_eff, inter_eff = _effs(link_eff)
    if same_node:
        return nbytes / (hw.intra_node_bw * intra_eff) + hw.intra_node_latency_s
    dpn = hw.devices_per_node
    k = dpn if senders is None else max(1, min(senders, dpn))
    nics = dpn if hw.nics_per_node is None else hw.nics_per_node
    bw = hw.inter_node_bw * dpn / max(k, nics)
    return nbytes / (bw * inter_eff) + hw.inter_node_latency_s


def make_collective(
    name: str,
    kind: CollectiveKind,
    buffer_bytes: float,
    count: float,
    n: int,
    g: int,
    hw: Hardware,
    link_eff: LinkEff,
) -> Collective:
    t, wire, link = collective_time(kind, buffer_bytes, n, g, hw, link_eff)
    return Collective(
        name=name,
        kind=kind,
        group_size=n,
        buffer_bytes=buffer_bytes,
        count=count,
        wire_bytes=wire * count,
        time_s=t * count,
        link=link,
    )

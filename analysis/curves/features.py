"""What the multi-power law needs at a set of evaluation steps, computed once per curve: S1(t), the
area under the whole schedule up to t (warm-up included), and annealing *nodes*: runs of at most
`resolution` steps after the peak (`data.peak_index`) whose learning-rate drops are summed, with
for every (evaluation point, node) pair the area S_k(t) from the node to the point. A law
evaluation is then a few array operations and a segment sum instead of O(points x steps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from analysis.curves.data import Curve, peak_index

FEATURE_KEYS = ("logS1", "pair_j", "pair_deta", "pair_logeta", "pair_logS")


@dataclass(frozen=True)
class Features:
    """What the law needs at a set of evaluation steps, flattened over all curves.

    `pair_*` list (evaluation point j, annealing node k) pairs with k <= t_j: node k stands for a
    run of consecutive steps (at most `resolution` long, never straddling a logged step) whose
    learning-rate drops sum to `pair_deta`; `pair_logS` is log S_k(t_j), the learning-rate area
    from the node to t_j, and `pair_logeta` the log learning rate at the node.
    """

    n: int
    logS1: np.ndarray  # (n,) log of the area under the schedule up to t_j (warm-up included)
    pair_j: np.ndarray
    pair_deta: np.ndarray
    pair_logeta: np.ndarray
    pair_logS: np.ndarray
    any_decay: bool  # whether the learning rate decreases before some evaluation step


def annealing_drops(eta: np.ndarray, warmup_rises: bool = False) -> np.ndarray:
    """d[k] = eta[k-1] - eta[k] for steps k after the schedule's peak, 0 up to the peak; with
    `warmup_rises`, for every step k >= 1 (the warm-up's rises enter as negative drops, as in
    Luo et al.'s code: `protocol.py`)."""
    d = np.zeros_like(eta)
    p = 0 if warmup_rises else peak_index(eta)
    d[p + 1 :] = eta[p:-1] - eta[p + 1 :]
    return d


def _nodes(steps: np.ndarray, peak: int, d: np.ndarray, resolution: int) -> tuple[np.ndarray, np.ndarray]:
    """(step k, summed drop w) per annealing node with w != 0.

    The gaps between logged steps, from the last one at or before the peak on, are split into
    chunks of <= `resolution` steps (so a log starting inside the warm-up is chunked like one
    starting at the peak). A node sits at its chunk's drop-weighted centre step (weights |d|):
    the middle step for a smooth decay, and exactly the step of a step change (a chunk's middle
    would misplace it by up to half a chunk)."""
    before = steps[steps <= peak]
    start = int(before[-1]) if before.size else peak  # chunks follow the logged steps, wherever the peak is
    edges = np.concatenate([[start], steps[steps > start]])
    idx = np.arange(d.size)
    csum_d = np.concatenate([[0.0], np.cumsum(d)])  # csum_d[i] = sum d[:i]
    csum_a = np.concatenate([[0.0], np.cumsum(np.abs(d))])
    csum_ka = np.concatenate([[0.0], np.cumsum(idx * np.abs(d))])
    ks, ws = [np.zeros(0, np.int64)], [np.zeros(0)]
    for a, b in zip(edges[:-1], edges[1:]):
        n_chunks = max(1, int(math.ceil((b - a) / resolution)))
        bounds = np.linspace(a, b, n_chunks + 1).round().astype(np.int64)  # chunk = steps (lo, hi]
        lo, hi = bounds[:-1], bounds[1:]
        w = csum_d[hi + 1] - csum_d[lo + 1]
        mass = csum_a[hi + 1] - csum_a[lo + 1]
        keep = (w != 0) & (mass > 0)
        centre = (csum_ka[hi + 1] - csum_ka[lo + 1])[keep] / mass[keep]
        ks.append(np.clip(np.rint(centre).astype(np.int64), lo[keep] + 1, hi[keep]))
        ws.append(w[keep])
    return np.concatenate(ks), np.concatenate(ws)


def _pairs(t: np.ndarray, k: np.ndarray, eta: np.ndarray, cum: np.ndarray):
    """(j, node index, log eta_k, log S_k(t_j)) for every evaluation point j and node k <= t_j."""
    J, K = np.meshgrid(np.arange(t.size), np.arange(k.size), indexing="ij")
    valid = k[K] <= t[J]
    J, K = J[valid], K[valid]
    S = cum[t[J]] - cum[k[K] - 1]
    eta_k = np.maximum(eta[k[K]], 1e-12 * np.max(eta))
    return J, K, np.log(eta_k), np.log(np.maximum(S, 1e-300))


def features(
    curves_eval: Sequence[tuple[Curve, np.ndarray]],
    resolution: int = 32,
    warmup_rises: bool = False,
) -> Features:
    """Features at evaluation steps `t` of each curve (t must lie within its logged schedule).

    warmup_rises: the MPL annealing nodes sum the schedule's changes from step 1 on, warm-up
    rises included (Luo et al.'s code; `protocol.py`), instead of from the peak on. S1 is the
    same either way."""
    logS1, pj, pdeta, plogeta, plogS = [], [], [], [], []
    offset, any_decay = 0, False
    for curve, t in curves_eval:
        eta = curve.schedule()
        cum = np.cumsum(eta)
        t = np.asarray(t, dtype=np.int64)
        logS1.append(np.log(cum[t]))
        peak = 0 if warmup_rises else peak_index(eta)
        k, w = _nodes(curve.steps, peak, annealing_drops(eta, warmup_rises), resolution)
        if k.size and t.size:
            any_decay |= bool(np.any(w[k <= t.max()] > 0))
            J, K, log_eta, log_S = _pairs(t, k, eta, cum)
            pj.append(J + offset)
            pdeta.append(w[K])
            plogeta.append(log_eta)
            plogS.append(log_S)
        offset += t.size
    cat = lambda xs, dt=float: np.concatenate(xs) if xs else np.zeros(0, dt)  # noqa: E731
    return Features(
        n=offset,
        logS1=cat(logS1),
        pair_j=cat(pj, np.int64),
        pair_deta=cat(pdeta),
        pair_logeta=cat(plogeta),
        pair_logS=cat(plogS),
        any_decay=any_decay,
    )


def subset(F: Features, keep: np.ndarray) -> Features:
    """The features of the evaluation points `keep` (a boolean mask over F's n points)."""
    new_j = np.cumsum(keep) - 1
    pk = keep[F.pair_j]
    return Features(
        n=int(keep.sum()),
        logS1=F.logS1[keep],
        pair_j=new_j[F.pair_j[pk]],
        pair_deta=F.pair_deta[pk],
        pair_logeta=F.pair_logeta[pk],
        pair_logS=F.pair_logS[pk],
        any_decay=bool(np.any(F.pair_deta[pk] > 0)),
    )

"""Mixture-of-experts loss laws: the functional forms in N (active / dense-equivalent parameters),
E (routed experts per MoE layer; dense runs have E = 1) and, where the runs vary it, D (tokens).

The registry (`analysis/laws/registry.py`) registers each form as a point law; `analysis/laws/moe.py`
chooses among them (`fit --law moe`). Every form works on numpy and jax arrays alike (`_xp`) and
takes log inputs, as the registry's `log_form`s do. N and D enter relative to fixed references
(`N_REF`, `D_REF`), so the intercepts are the log loss of a 1B-parameter (dense-equivalent) model
and the coefficients of the products stay well conditioned for the optimiser:

- `bilinear` (the baseline): log L = d + a x + b log E + c x log E, x = log(N / N_REF): a plane in
  (log N, log E) with the interaction c (the benefit of experts shrinks with N when c > 0);
- `clark`: Clark et al. 2022 ("Unified Scaling Laws for Routed Language Models", eq. 7-8), the same
  form in the saturating expert count

      1/Ê = 1 / (E - 1 + (1/E_start - 1/E_max)^-1) + 1/E_max,

  so that Ê(1) = E_start (dense; small E help less than their log suggests) and Ê -> E_max for
  E -> infinity (the benefit saturates). The transform needs E_start < E_max; we enforce it by
  the bounds E_start in (0, E_SPLIT), E_max in (E_SPLIT, inf) (E_SPLIT = 16: the paper's fits have
  E_start of a few experts and E_max of hundreds);
- `joint`: Ludziejewski et al. 2025 ("Joint MoE Scaling Laws: Mixture of Experts Can Be Memory
  Efficient"): L = c + A Ê^delta N^-(alpha + gamma ln Ê) + B Ê^omega D^-(beta + zeta ln Ê), an
  irreducible loss and Chinchilla's two power laws whose coefficients and exponents move with
  the (transformed) expert count, Clark et al.'s Ê here. On a fixed-token ladder (one D) the data
  term is a constant of each E; `joint_n` keeps the irreducible loss and the N term. With c -> 0
  its log is `clark` exactly (and `bilinear` with E_start = 1, E_max -> inf): the forms nest, and
  the irreducible loss is what lets the loss bend as N grows;
- with D: `bilinear_d` adds e log(D / D_REF) to the log-bilinear form (the baseline of an
  (N, D, E) ladder).
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np

N_REF = 1e9  # N at which x = log(N / N_REF) = 0: the intercepts are a 1B model's
D_REF = 1e10  # D at which log(D / D_REF) = 0
E_SPLIT = 16.0  # E_start < E_SPLIT < E_max (the saturating transform needs E_start < E_max)


def _xp(*xs):
    return jnp if any(isinstance(x, jax.Array) for x in xs) else np


def log_e_hat(log_e, e_start, e_max):
    """log Ê of Clark et al.'s saturating transform, from log E (E >= 1) and E_start < E_max."""
    xp = _xp(log_e, e_start, e_max)
    k = 1.0 / (1.0 / e_start - 1.0 / e_max)
    inv = 1.0 / (xp.exp(log_e) - 1.0 + k) + 1.0 / e_max
    return -xp.log(inv)


def e_hat(experts, e_start: float, e_max: float) -> np.ndarray:
    """Ê (linear) for expert counts `experts`."""
    return np.exp(log_e_hat(np.log(np.asarray(experts, float)), e_start, e_max))


def _x(log_n):
    return log_n - np.log(N_REF)


def _y(log_d):
    return log_d - np.log(D_REF)


def bilinear(view, logX):
    d, a, b, c = view
    x, le = _x(logX[0]), logX[1]
    return d + a * x + b * le + c * x * le


def bilinear_d(view, logX):
    d, a, b, c, e = view
    return bilinear((d, a, b, c), logX[:2]) + e * _y(logX[2])


def clark(view, logX):
    d, a, b, c, e_start, e_max = view
    x, leh = _x(logX[0]), log_e_hat(logX[1], e_start, e_max)
    return d + a * x + b * leh + c * x * leh


def _logsumexp(*terms):
    xp = _xp(*terms)
    terms = xp.broadcast_arrays(*terms)
    m = terms[0]
    for t in terms[1:]:
        m = xp.maximum(m, t)
    if xp is jnp:
        m = jax.lax.stop_gradient(m)
    return m + xp.log(sum(xp.exp(t - m) for t in terms))


def joint_n(view, logX):
    """log of c + A Ê^delta (N/N_REF)^-(alpha + gamma ln Ê); `view`: log c, log A, alpha, gamma,
    delta, E_start, E_max."""
    lc, la, alpha, gamma, delta, e_start, e_max = view
    x, le = _x(logX[0]), log_e_hat(logX[1], e_start, e_max)
    return _logsumexp(lc, la + delta * le - (alpha + gamma * le) * x)


def joint(view, logX):
    """log of c + A Ê^delta (N/N_REF)^-(alpha + gamma ln Ê) + B Ê^omega (D/D_REF)^-(beta + zeta ln Ê)."""
    lc, la, alpha, gamma, delta, lb, beta, zeta, omega, e_start, e_max = view
    x, le, y = _x(logX[0]), log_e_hat(logX[1], e_start, e_max), _y(logX[2])
    return _logsumexp(
        lc, la + delta * le - (alpha + gamma * le) * x, lb + omega * le - (beta + zeta * le) * y
    )


# ---- start grids (public values), scaled to the data where a scale matters ------------------------
def _product(*axes) -> np.ndarray:
    return np.array(list(itertools.product(*axes)), dtype=float)


def bilinear_grid(logX, logy):
    d0 = float(np.median(logy))
    return _product((d0,), (-0.1, 0.0), (-0.05, 0.0), (0.0, 0.01))


def bilinear_d_grid(logX, logy):
    g = bilinear_grid(logX, logy)
    return np.column_stack([np.repeat(g, 2, axis=0), np.tile([-0.1, 0.0], len(g))])


CLARK_E_STARTS = (0.5, 1.0, 2.0, 5.0)
CLARK_E_MAXES = (40.0, 300.0, 1e4)


def clark_grid(logX, logy):
    d0 = float(np.median(logy))
    return _product((d0,), (-0.08,), (-0.05,), (0.0, 0.01), CLARK_E_STARTS, CLARK_E_MAXES)


JOINT_ALPHAS = (0.1, 0.3, 0.6)
FLOOR_FRACTIONS = (0.3, 0.6, 0.85)


def _floor_and_amplitude(logX, logy, alphas):
    """(floor, log A) start pairs: floors at fractions of the lowest loss, A so that the N term
    carries the rest of the median run's loss at the median N."""
    x_med = float(np.median(_x(logX[0])))
    y_med, y_min = float(np.exp(np.median(logy))), float(np.exp(np.min(logy)))
    out = []
    for f in FLOOR_FRACTIONS:
        c = f * y_min
        for al in alphas:
            out.append((c, np.log(max(y_med - c, 1e-3 * y_med)) + al * x_med, al))
    return out


JOINT_E_HATS = ((1.0, 1e4), (2.0, 300.0))  # (E_start, E_max) starts: no saturation, Clark-like


def joint_n_grid(logX, logy):
    return np.array(
        [
            (c, np.exp(la), al, g, dl, es, em)
            for c, la, al in _floor_and_amplitude(logX, logy, JOINT_ALPHAS)
            for g in (-0.02, 0.0)
            for dl in (-0.1, 0.0)
            for es, em in JOINT_E_HATS
        ]
    )


def joint_grid(logX, logy):
    y_med = float(np.exp(np.median(logy)))
    rows = []
    for c, la, al in _floor_and_amplitude(logX, logy, JOINT_ALPHAS):
        for dl in (-0.1, 0.0):
            for be in (0.2, 0.5):
                # the data term starts at a fifth of the median loss at D_REF
                for es, em in JOINT_E_HATS:
                    rows.append((c, np.exp(la) * 0.8, al, 0.0, dl, 0.2 * y_med, be, 0.0, 0.0, es, em))
    return np.array(rows)

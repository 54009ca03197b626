"""Context-parallel attention: the sequence is split over the mesh axis `context`; K/V are all-gathered.

With `sharding.context=C` every activation's sequence dim is split over `context` (logical axes
`length` / `resid_length` in sharding/rules.py), so embeddings, norms, projections, MLP and loss
run on L/C tokens per device with no communication. Attention is the only op that mixes
positions: each device keeps its L/C queries and gathers the full-length K and V
(`kv_length` is never split), then computes its (L/C) x L block of causal scores.

Why all-gather and not ring attention: it is a pair of sharding constraints that XLA's SPMD
partitioner turns into one all-gather of K and V in the forward pass and one reduce-scatter of
their gradients in the backward pass; the model keeps its global view, so RoPE and the causal
mask use global positions by construction, and it composes with data / fsdp / tensor (+SP)
without a manual shard_map. Ring attention (ppermute of K/V blocks overlapped with compute)
would keep only 2 K/V blocks in memory instead of the full sequence; it pays off when L is long
enough that full-length K/V per device (or the C-1 hop latency it hides) matters.

Cost per layer and device, B_d = batch rows per device, K_t = KV heads per tensor rank, E = d_head:
* communication: all-gather of K and V, 2 B_d L K_t E values, (C-1)/C of them on the wire
  (forward, again for recomputation under remat), reduce-scatter of dK and dV in the backward;
* memory: full-length K and V (2 B_d L K_t E) plus the float32 scores B_d H_t (L/C) L, i.e. the
  score memory falls by C but K/V do not;
* compute: every device computes its whole (L/C) x L score block (masked tiles included), so the
  work is balanced across devices without a zig-zag layout, at the price of the masked half:
  attention score FLOPs per device are L^2/C instead of the causal optimum L^2/(2C). The
  single-device blocked kernel's tile skipping (models.transformer.attention_blocks) is not used.
"""

from __future__ import annotations

import jax

from models import axes
from models.transformer import causal_attention


def gathered_kv_attention(q_BxLxKxGxE: jax.Array, k_BxLxKxE: jax.Array, v_BxLxKxE: jax.Array) -> jax.Array:
    """Causal GQA attention with queries split over `context` and K/V gathered (see module doc).

    Same math as models.transformer.causal_attention (one query block over the whole sequence),
    so a context-parallel run computes the same numbers as one device up to summation order.
    """
    L = q_BxLxKxGxE.shape[1]
    q = axes.constrain(q_BxLxKxGxE, (axes.BATCH, axes.LENGTH, axes.ACT_KV_HEADS, None, axes.KV))
    k = axes.constrain(k_BxLxKxE, (axes.BATCH, axes.KV_LENGTH, axes.ACT_KV_HEADS, axes.KV))
    v = axes.constrain(v_BxLxKxE, (axes.BATCH, axes.KV_LENGTH, axes.ACT_KV_HEADS, axes.KV))
    o = causal_attention(q, k, v, blocks=[(0, L)])
    return axes.constrain(o, (axes.BATCH, axes.LENGTH, axes.ACT_KV_HEADS, None, axes.KV))

"""Tool-sequence metrics for PhGPO: match ratio, exact match, normalised LCS, success, pass@k.

Host versions take Python sequences of tool names or ids (evaluation tables); the `_batch`
versions take padded i32[B, H] arrays with lengths and are pure jnp (training loop, jit).

Sources: PhGPO, arXiv:2602.13691, sec. "Metrics" (SPEC.md "PhGPO", "Metrics"), and the
authors' released training script (github.com/ElevenLiy/PhGPO-Pheromone-Guided-Policy-
Optimization-for-Long-Horizon-Tool-Planning, code/train_grpo_aco_v12_qwen_7b.py), whose match
ratio is the position-wise one below: rollouts run min(max_steps, len(gold)) steps and
match_ratio = #{t : pred[t] == gold[t]} / max(1, min(horizon, len(gold))); success is
match_ratio >= 0.7. pass@k: Chen et al. 2021, "Evaluating Large Language Models Trained on
Code", arXiv:2107.03374, eq. 1.
"""
from __future__ import annotations

from typing import Hashable, Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np

SUCCESS_THRESHOLD = 0.7


def match_ratio(pred: Sequence[Hashable], gold: Sequence[Hashable], *, horizon: int = 20) -> float:
  """Position-wise match ratio over the first min(horizon, len(gold)) gold calls.

  MR = #{t < L : t < len(pred), pred[t] == gold[t]} / max(1, L),  L = min(horizon, len(gold)).
  Source: the authors' released code (module docstring); there the rollout always has exactly
  L steps. Here a shorter prediction counts its missing positions as misses, and predicted
  calls beyond L are ignored. An empty gold sequence gives 0.0 (as in the authors' code).

  Args:
    pred: predicted tool sequence (names or ids).
    gold: gold tool sequence.
    horizon: maximum number of steps compared (config `env.max_steps`; published: 20).
  Returns:
    float in [0, 1].
  """
  if horizon < 1:
    raise ValueError(f"horizon must be >= 1, got {horizon}.")
  length = min(horizon, len(gold))
  hits = sum(1 for p, g in zip(list(pred)[:length], list(gold)[:length]) if p == g)
  return hits / max(1, length)


def exact_match(pred: Sequence[Hashable], gold: Sequence[Hashable]) -> bool:
  """Exact sequence match: same length and the same tool at every position.

  Matches the authors' `full_exact_match` (prefix match and as many steps as gold calls).
  """
  return list(pred) == list(gold)


def lcs_length(pred: Sequence[Hashable], gold: Sequence[Hashable]) -> int:
  """Length of the longest common subsequence (O(len(pred) * len(gold)) dynamic programme)."""
  pred, gold = list(pred), list(gold)
  row = [0] * (len(gold) + 1)
  for p in pred:
    prev_diag = 0
    for j, g in enumerate(gold, start=1):
      saved = row[j]
      row[j] = prev_diag + 1 if p == g else max(row[j], row[j - 1])
      prev_diag = saved
  return row[-1]


def lcs_score(pred: Sequence[Hashable], gold: Sequence[Hashable]) -> float:
  """Normalised LCS: LCS(pred, gold) / max(len(pred), len(gold)); 1.0 when both are empty.

  The SPEC's order-aware "sequence-level agreement" (SPEC.md "PhGPO", "Metrics"). Dividing by
  the longer length penalises both missing and extra calls; it is 1 only for an exact match.
  """
  denom = max(len(pred), len(gold))
  return 1.0 if denom == 0 else lcs_length(pred, gold) / denom


def success(match_ratio_value, threshold: float = SUCCESS_THRESHOLD):
  """Task success: match ratio >= threshold (published: 0.7); works on floats and arrays.

  Config key `eval.success_threshold`. (The authors additionally require the gold episode to
  be marked successful; TRAJECT-Bench gold trajectories are.)
  """
  if isinstance(match_ratio_value, (int, float)):
    return bool(match_ratio_value >= threshold)
  return match_ratio_value >= threshold


def summarize(preds: Sequence[Sequence[Hashable]], golds: Sequence[Sequence[Hashable]], *,
              horizon: int = 20, threshold: float = SUCCESS_THRESHOLD) -> dict[str, float]:
  """Mean metrics over pairs of predicted and gold sequences (host side).

  Returns:
    {'match_ratio', 'exact_match', 'lcs', 'success', 'count'}: means as floats, count an int.
  Raises:
    ValueError if the two lists differ in length.
  """
  if len(preds) != len(golds):
    raise ValueError(f"{len(preds)} predictions but {len(golds)} gold sequences.")
  if not preds:
    return {"match_ratio": 0.0, "exact_match": 0.0, "lcs": 0.0, "success": 0.0, "count": 0}
  mr = [match_ratio(p, g, horizon=horizon) for p, g in zip(preds, golds)]
  return {
      "match_ratio": float(np.mean(mr)),
      "exact_match": float(np.mean([exact_match(p, g) for p, g in zip(preds, golds)])),
      "lcs": float(np.mean([lcs_score(p, g) for p, g in zip(preds, golds)])),
      "success": float(np.mean([success(m, threshold) for m in mr])),
      "count": len(preds),
  }


# ---------------------------------------------------------------------------------------------
# Batched jnp versions over padded arrays.


def _check_batch(pred, pred_len, gold, gold_len):
  chex.assert_rank([pred, pred_len, gold, gold_len], [2, 1, 2, 1])
  chex.assert_type([pred, pred_len, gold, gold_len], int)
  chex.assert_equal_shape_prefix([pred, pred_len, gold, gold_len], 1)


def _aligned(pred, gold):
  """pred[:, :K], gold[:, :K] with K = min(H, G) and the position index."""
  k = min(pred.shape[1], gold.shape[1])
  return pred[:, :k], gold[:, :k], jnp.arange(k)[None, :]


def match_ratio_batch(pred: chex.Array, pred_len: chex.Array, gold: chex.Array,
                      gold_len: chex.Array, *, horizon: int = 20) -> jax.Array:
  """Batched `match_ratio`.

  Args:
    pred: i32[B, H] predicted tool ids (any padding value).
    pred_len: i32[B] number of valid predicted steps.
    gold: i32[B, G] gold tool ids (any padding value).
    gold_len: i32[B] number of gold calls.
    horizon: static maximum compared steps.
  Returns:
    f32[B] in [0, 1].
  """
  _check_batch(pred, pred_len, gold, gold_len)
  p, g, t = _aligned(pred, gold)
  length = jnp.minimum(gold_len, horizon)
  hit = (p == g) & (t < length[:, None]) & (t < pred_len[:, None])
  return jnp.sum(hit, axis=-1).astype(jnp.float32) / jnp.maximum(length, 1).astype(jnp.float32)


def exact_match_batch(pred: chex.Array, pred_len: chex.Array, gold: chex.Array,
                      gold_len: chex.Array) -> jax.Array:
  """Batched `exact_match`: bool[B], equal lengths and equal ids at every valid position."""
  _check_batch(pred, pred_len, gold, gold_len)
  p, g, t = _aligned(pred, gold)
  differs = (p != g) & (t < gold_len[:, None])
  fits = gold_len <= min(pred.shape[1], gold.shape[1])
  return (pred_len == gold_len) & fits & ~jnp.any(differs, axis=-1)


def lcs_length_batch(pred: chex.Array, pred_len: chex.Array, gold: chex.Array,
                     gold_len: chex.Array) -> jax.Array:
  """Batched LCS length, i32[B], by a row scan: dp_i = cummax_j max(dp_{i-1}[j], dp_{i-1}[j-1] + eq).

  (dp_i[j] = max(a[j], dp_i[j-1]) with a[j] = max(dp_{i-1}[j], dp_{i-1}[j-1] + eq_ij) unrolls
  to a prefix maximum, so each row is one vectorised step.) O(H * G) per row, lax.scan over H.
  """
  _check_batch(pred, pred_len, gold, gold_len)
  b, g_width = gold.shape
  col = jnp.arange(g_width)[None, :]
  gold_ok = col < gold_len[:, None]

  def step(dp, inputs):  # dp: i32[B, G+1], dp[:, 0] = 0
    tok, i = inputs
    eq = (tok[:, None] == gold) & gold_ok & (i < pred_len)[:, None]
    a = jnp.maximum(dp[:, 1:], dp[:, :-1] + eq.astype(jnp.int32))
    row = jax.lax.cummax(a, axis=1)
    return jnp.concatenate([jnp.zeros((b, 1), jnp.int32), row], axis=1), None

  dp0 = jnp.zeros((b, g_width + 1), jnp.int32)
  dp, _ = jax.lax.scan(step, dp0, (pred.T, jnp.arange(pred.shape[1])))
  return dp[:, -1]


def lcs_score_batch(pred: chex.Array, pred_len: chex.Array, gold: chex.Array,
                    gold_len: chex.Array) -> jax.Array:
  """Batched `lcs_score`: f32[B], LCS / max(pred_len, gold_len), 1.0 where both are 0."""
  lcs = lcs_length_batch(pred, pred_len, gold, gold_len).astype(jnp.float32)
  denom = jnp.maximum(pred_len, gold_len)
  return jnp.where(denom > 0, lcs / jnp.maximum(denom, 1).astype(jnp.float32), 1.0)


def summarize_batch(pred: chex.Array, pred_len: chex.Array, gold: chex.Array,
                    gold_len: chex.Array, *, horizon: int = 20,
                    threshold: float = SUCCESS_THRESHOLD,
                    row_mask: chex.Array | None = None) -> dict[str, jax.Array]:
  """Mean metrics over a padded batch (jnp scalars; jittable).

  Args:
    pred, pred_len, gold, gold_len: as in `match_ratio_batch`.
    horizon: static maximum compared steps.
    threshold: success threshold on the match ratio.
    row_mask: optional bool[B], rows that count (e.g. batch padding False).
  Returns:
    {'match_ratio', 'exact_match', 'lcs', 'success'}: f32[] means over counted rows (0 if none).
  """
  mr = match_ratio_batch(pred, pred_len, gold, gold_len, horizon=horizon)
  per_row = {
      "match_ratio": mr,
      "exact_match": exact_match_batch(pred, pred_len, gold, gold_len).astype(jnp.float32),
      "lcs": lcs_score_batch(pred, pred_len, gold, gold_len),
      "success": (mr >= threshold).astype(jnp.float32),
  }
  weight = jnp.ones_like(mr) if row_mask is None else row_mask.astype(jnp.float32)
  total = jnp.maximum(jnp.sum(weight), 1.0)
  return {k: jnp.sum(v * weight) / total for k, v in per_row.items()}

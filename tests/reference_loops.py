"""float64 NumPy references written as plain loops, and random per-turn rows, shared by the tests of the
grouped per-turn advantages (tests/gigpo_test.py, tests/planpo_advantages_test.py)."""
import numpy as np


def ref_normalise(values, norm, eps, ddof):
  """Group normalisation of a list of floats; constant groups and groups of one give 0."""
  n = len(values)
  if n <= 1 or len(set(values)) == 1:
    return [0.0] * n
  mean = sum(values) / n
  if norm == "none":
    return [v - mean for v in values]
  std = np.sqrt(sum((v - mean) ** 2 for v in values) / (n - ddof)) if n > ddof else 0.0
  return [(v - mean) / (std + eps) for v in values]


def ref_turns(rollout, mask):
  turns = {}
  for r in range(len(rollout)):
    if mask[r]:
      turns[rollout[r]] = turns.get(rollout[r], 0) + 1
  return turns


def ref_episode(values, group, rollout, mask, stats_over, norm, eps, ddof):
  """values: per-row (constant within a rollout)."""
  out = np.zeros(len(values))
  for g in set(group.tolist()):
    if stats_over == "turns":
      rows = [r for r in range(len(values)) if mask[r] and group[r] == g]
      adv = ref_normalise([float(values[r]) for r in rows], norm, eps, ddof)
      for r, a in zip(rows, adv):
        out[r] = a
    else:
      rolls = sorted({int(rollout[r]) for r in range(len(values)) if mask[r] and group[r] == g})
      vals = [float(values[[r for r in range(len(values)) if mask[r] and rollout[r] == j][0]])
              for j in rolls]
      adv = dict(zip(rolls, ref_normalise(vals, norm, eps, ddof)))
      for r in range(len(values)):
        if mask[r] and group[r] == g:
          out[r] = adv[int(rollout[r])]
  return out


def random_rows(seed, num_groups=4, per_group=4, max_turns=6, masked_fraction=0.15, pad=5,
                num_anchors=4):
  """Shuffled per-turn rows of num_groups * per_group rollouts, some rows masked, `pad` padding rows."""
  rng = np.random.default_rng(seed)
  rows = []
  rollout = 0
  for g in range(num_groups):
    for _ in range(per_group):
      n = int(rng.integers(1, max_turns + 1))
      win = bool(rng.random() < 0.5)
      score = float(rng.integers(0, 3)) if not win else 10.0
      for t in range(n):
        step_r = (10.0 if (win and t == n - 1) else 0.0) - (0.1 if rng.random() < 0.2 else 0.0)
        rows.append(dict(g=g, i=rollout, t=t, ep=score, win=win, step=step_r,
                         length=int(rng.integers(0, 40)), anchor=f"obs{rng.integers(num_anchors)}",
                         m=bool(rng.random() >= masked_fraction)))
      rollout += 1
  for _ in range(pad):
    rows.append(dict(g=0, i=0, t=0, ep=np.nan, win=True, step=np.inf, length=7, anchor="pad", m=False))
  rng.shuffle(rows)
  col = lambda k, dt: np.array([row[k] for row in rows], dt)
  return dict(group=col("g", np.int32), rollout=col("i", np.int32), turn=col("t", np.int32),
              ep=col("ep", np.float32), win=col("win", bool), step=col("step", np.float32),
              length=col("length", np.int32), anchor=[row["anchor"] for row in rows],
              mask=col("m", bool), num_groups=num_groups, num_rollouts=rollout, max_turns=max_turns)

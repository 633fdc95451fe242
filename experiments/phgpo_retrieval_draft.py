r"""DRAFT (issue 24 groundwork, not a table row yet): training-free retrieval baselines on TRAJECT-Bench.

Prints, for each split, the held-out match ratio and exact match of
  - the nearest copy (`phgpo.evaluation.nearest_query`, the main table's 'nearest' row), and
  - the 1-, 3- and 5-neighbour similarity-weighted position votes (`phgpo.retrieval`), decoded to the gold
    horizon as the policy's rollout is (config `env.horizon = 'gold'`),
and the same votes on the training queries with the leakage mask the retrieval policy would train with
(leave-one-out on the random split, leave-chain-out on the chain split; each also with the other mask), so the
gap between what training sees and what the test sees can be read off.

No training and no randomness: the split is fixed by `data.split_seed` (0), not by the run seed, so every seed
of the main table's 'nearest' row is this one number.

  PYTHONPATH=. .venv/bin/python -m experiments.phgpo_retrieval_draft [--pickle=/tmp/problems.pkl]

--pickle caches the two prepared problems (embedding and loading take a few minutes on a busy machine).
"""

from __future__ import annotations

import os
import pickle
import sys

import numpy as np


def _problems(path: str | None) -> dict:
  if path and os.path.exists(path):
    with open(path, "rb") as f:
      return pickle.load(f)
  from configs import phgpo_traject  # pylint: disable=g-import-not-at-top
  from phgpo import problem as problem_lib  # pylint: disable=g-import-not-at-top
  config = phgpo_traject.get_config()
  out = {split: problem_lib.prepare_problem(config, split) for split in ("random", "chain")}
  if path:
    with open(path, "wb") as f:
      pickle.dump(out, f)
  return out


def vote_predictions(problem, task_idx, groups, *, k: int):
  """(pred i32[B, H], pred_len i32[B], neighbour task rows i64[B, k]) of the k-neighbour position vote."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from phgpo import retrieval  # pylint: disable=g-import-not-at-top
  train = np.sort(np.asarray(problem.train_idx, np.int64))
  task_idx = np.asarray(task_idx, np.int64)
  emb = np.asarray(problem.query_emb, np.float32)
  idx, sim, valid = retrieval.nearest_neighbours(
      jnp.asarray(emb[task_idx]), jnp.asarray(emb[train]), jnp.asarray(groups[task_idx]),
      jnp.asarray(groups[train]), k=k)
  rows = train[np.asarray(idx)]
  nb_tools = jnp.asarray(problem.gold_tools[rows])
  nb_len = jnp.asarray(problem.gold_len[rows])
  pred, pred_len = retrieval.vote_decode(nb_tools, nb_len, retrieval.vote_weights(sim, valid),
                                         jnp.asarray(problem.gold_len[task_idx]),
                                         num_tools=len(problem.graph.tool_names))
  return np.asarray(pred), np.asarray(pred_len), rows


def main(argv) -> None:
  path = None
  for a in argv[1:]:
    if a.startswith("--pickle="):
      path = a.split("=", 1)[1]
  from phgpo import evaluation  # pylint: disable=g-import-not-at-top
  from phgpo import retrieval  # pylint: disable=g-import-not-at-top
  probs = _problems(path)
  pct = lambda m: f"{100 * m['match_ratio']:6.2f} {100 * m['exact_match']:6.2f}"
  for split, p in probs.items():
    ev = np.asarray(p.eval_idx, np.int64)
    near = evaluation.nearest_query(p)
    print(f"\n{split} split: {len(p.train_idx)} train, {len(ev)} held out; match ratio, exact match (percent)")
    print(f"  nearest copy (own length)          {pct(near)}")
    mode = "task" if split == "random" else "chain"
    groups = {m: retrieval.leakage_groups(p.tasks, mode=m) for m in retrieval.LEAKAGE_MODES}
    for k in (1, 3, 5):
      pred, plen, rows = vote_predictions(p, ev, groups[mode], k=k)
      m = evaluation._summarize(p, ev, pred, plen, success_threshold=0.7)  # pylint: disable=protected-access
      extra = ""
      if k == 1:
        row_of = {str(t.task_id): i for i, t in enumerate(p.tasks)}
        near_rows = np.array([row_of[i] for i in near["per_task"]["neighbour_task_id"]], np.int64)
        same = int(np.sum(near_rows == rows[:, 0]))
        same_chain = int(np.sum(np.all(p.gold_tools[near_rows] == p.gold_tools[rows[:, 0]], axis=1)))
        extra = f"   (same neighbour as nearest_query: {same}/{len(ev)}, same chain: {same_chain}/{len(ev)})"
      print(f"  {k}-neighbour vote (gold horizon)    {pct(m)}{extra}")
    tr = np.asarray(p.train_idx, np.int64)
    for m_name in retrieval.LEAKAGE_MODES:
      for k in (1, 3, 5):
        pred, plen, _ = vote_predictions(p, tr, groups[m_name], k=k)
        m = evaluation._summarize(p, tr, pred, plen, success_threshold=0.7)  # pylint: disable=protected-access
        tag = "leave-one-out" if m_name == "task" else "leave-chain-out"
        print(f"  train queries, {tag:15s} {k}-vote {pct(m)}")


if __name__ == "__main__":
  main(sys.argv)

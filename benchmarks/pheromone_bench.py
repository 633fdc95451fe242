"""Pheromone update + log-prior sampling: jit-compiled JAX vs a per-edge Python dictionary loop.

    python -m benchmarks.pheromone_bench [--quick]

One iteration = one task's group of M = 5 rollouts over H = 20 steps: at every step each rollout
looks up the pheromone of its top-K (K = 20) candidate tools, samples a tool from
softmax((log pi + beta log tau) / T) and a template from tau_arg; then one pheromone update
(evaporation of every edge, deposit on traversed edges, MAX-MIN clipping, argument pheromone,
memory-bank writes). Measured in the same run for N = 381 (TRAJECT-Bench) and N = 4096 tools.
The JAX update evaporates lazily (`pheromone.update_pheromone`: only the B*H traversed entries
are rewritten, from their effective values; exact), jit-compiled with the state donated; the
samplers read effective rows (`pheromone_rows`, `arg_rows`).

The baseline follows the published code (ElevenLiy/PhGPO..., train_grpo_aco_v12_qwen_7b.py):
pheromone as a dict of dicts of floats over the graph's edges (each tool has 8 random successors
here; START has all tools), evaporation by looping over every stored edge, deposit per traversed
edge, and sampling per rollout with NumPy (top-K, pheromone look-ups, softmax, multinomial). The
'fused' rows add the task-dependent pheromone: per-edge lists of (embedding, score) in Python vs
the per-edge bank of (task row, score) here (`phgpo.memory_bank`, dense [N+1, N, M]: M = 16 entries
per edge at N = 381, 18.6 MB; M = 2 at N = 4096, 268 MB, since the dense bank grows as N^2 M). The policy is replaced by fixed random logits in both.

Printed: milliseconds per iteration (best of several runs) and the ratio python / jax (higher =
JAX faster). The JAX update costs O(B*H) whatever N (the tables are dense [N+1, N] in memory
but only the traversed entries are touched); the Python dict's evaporation loop costs
O(edges). Both numbers are reported as measured.
"""
from __future__ import annotations

import collections
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import _cli
from phgpo import edges
from phgpo import memory_bank
from phgpo import pheromone as ph
from phgpo import sampling

M, H, K, TM, D = 5, 20, 20, 8, 384
DEGREE = 8
HP = dict(rho=0.05, alpha=0.5, tau_min=0.05, tau_max=5.0, arg_rho=0.05, arg_alpha=0.3)
TAU0, BETA, TEMPERATURE, W, KAPPA, TOPK_SIM, SIM_THRESHOLD = 1.0, 0.7, 0.7, 0.5, 1.0, 16, 0.0
NUM_TASKS = 256   # task rows the bank may name (the key table of `memory_bank.bank_similarity`)
MAX_MEMORY_PER_EDGE = 100


def _problem(n: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  succ = [rng.choice(n, size=DEGREE, replace=False) for _ in range(n)]
  edge_mask = np.zeros((n + 1, n), bool)
  for i, s in enumerate(succ):
    edge_mask[i, s] = True
  edge_mask[n] = True
  num_templates = rng.integers(1, TM + 1, size=n)
  template_mask = np.arange(TM)[None, :] < num_templates[:, None]
  logits = rng.normal(scale=2.0, size=(H, M, n)).astype(np.float32)
  keys = rng.normal(size=(NUM_TASKS, D)).astype(np.float32)
  task_ids = rng.integers(0, NUM_TASKS, size=M).astype(np.int32)
  return edge_mask, template_mask, logits, (keys, task_ids)


# ------------------------------------------------------------------------------------------------
# JAX


def _jax_fns(n: int, fused: bool):
  w = W if fused else 0.0

  def sample_episode(state, key, logits, task, template_mask):
    keys, task_ids = task
    sim = memory_bank.bank_similarity(keys, keys[task_ids]) if fused else None  # constant over the episode

    def step(prev, xs):
      lg, k = xs
      k1, k2 = jax.random.split(k)
      rows = ph.pheromone_rows(state, prev, sim, w=w, kappa=KAPPA, top_k_similar=TOPK_SIM,
                               tau_min=HP["tau_min"], tau_max=HP["tau_max"], sim_threshold=SIM_THRESHOLD)
      tools, _ = sampling.sample_tools(k1, lg, jnp.log(rows), top_k=K, temperature=TEMPERATURE,
                                       beta=BETA)
      # Effective tau_arg rows of the chosen tools only (O(B Tm)); row b is rollout b's tool.
      arg = ph.arg_rows(state, tools, tau_min=HP["tau_min"])
      row_of = jnp.where(tools >= 0, jnp.arange(tools.shape[0]), -1)
      tmpl = sampling.sample_templates(k2, arg, edges.take_rows(template_mask, tools), row_of)
      return tools, (tools, tmpl)

    prev0 = jnp.full((logits.shape[1],), n, jnp.int32)
    _, (tools, tmpl) = jax.lax.scan(step, prev0, (logits, jax.random.split(key, logits.shape[0])))
    return tools.T, tmpl.T

  def update(state, tools, tmpl, scores, task):
    return ph.update_pheromone(state, tools, tmpl, tools >= 0, scores, task[1], **HP)

  def iteration(state, key, logits, task, scores, template_mask):
    tools, tmpl = sample_episode(state, key, logits, task, template_mask)
    return update(state, tools, tmpl, scores, task), tools

  return (jax.jit(sample_episode), jax.jit(update, donate_argnums=0),
          jax.jit(iteration, donate_argnums=0))


# ------------------------------------------------------------------------------------------------
# Python dict-of-dicts baseline (the published code's data structures and loops).


class DictPheromone:
  """tau[prev][next] floats, tau_param[tool][variant], memory[(prev, next)] lists."""

  def __init__(self, edge_mask, template_mask, fused: bool):
    self.tau = collections.defaultdict(lambda: collections.defaultdict(lambda: TAU0))
    for i, j in zip(*np.nonzero(edge_mask)):
      self.tau[int(i)][int(j)] = TAU0
    self.tau_param = {i: {t: TAU0 for t in range(int(template_mask[i].sum()))}
                      for i in range(template_mask.shape[0])}
    self.memory = collections.defaultdict(list)
    self.fused = fused

  def get_tau(self, prev, nxt, emb):
    scalar = self.tau[prev][nxt]
    if not self.fused:
      return scalar
    mem = self.memory.get((prev, nxt))
    if not mem:
      return scalar
    embs = np.stack([m[0] for m in mem])
    scores = np.array([m[1] for m in mem])
    sims = embs @ emb / (np.linalg.norm(embs, axis=1) * np.linalg.norm(emb) + 1e-8)
    keep = sims > 0
    if not keep.any():
      return scalar
    top = np.argsort(-np.where(keep, sims, -np.inf))[:TOPK_SIM]
    top = top[keep[top]]
    s = sims[top].sum()
    qbar = float((sims[top] * scores[top]).sum() / s)
    conf = s / (s + KAPPA)
    dep = HP["tau_min"] + qbar * (HP["tau_max"] - HP["tau_min"])
    return min(HP["tau_max"], max(HP["tau_min"], (1 - W * conf) * scalar + W * conf * dep))

  def sample(self, rng, logits, emb, n):
    tools = np.full((M, H), -1, np.int64)
    tmpls = np.full((M, H), -1, np.int64)
    for m in range(M):
      prev = n
      for h in range(H):
        lg = logits[h, m].astype(np.float64)
        logp = lg - lg.max() - np.log(np.exp(lg - lg.max()).sum())
        cand = np.argpartition(-lg, K)[:K]
        taus = np.array([self.get_tau(prev, int(c), emb[m]) for c in cand])
        score = (logp[cand] + BETA * np.log(taus)) / TEMPERATURE
        p = np.exp(score - score.max())
        a = int(cand[rng.choice(K, p=p / p.sum())])
        variants = self.tau_param[a]
        pv = np.array(list(variants.values()))
        tmpls[m, h] = list(variants)[rng.choice(len(pv), p=pv / pv.sum())]
        tools[m, h] = a
        prev = a
    return tools, tmpls

  def update(self, tools, tmpls, scores, emb, n):
    rho, alpha, lo, hi = HP["rho"], HP["alpha"], HP["tau_min"], HP["tau_max"]
    for prev in list(self.tau):
      row = self.tau[prev]
      for nxt in list(row):
        row[nxt] = max(lo, row[nxt] * (1 - rho))
    for tool, variants in self.tau_param.items():
      for v in variants:
        variants[v] = max(lo, variants[v] * (1 - HP["arg_rho"]))
    for m in range(tools.shape[0]):
      prev, seen = n, set()
      for h in range(tools.shape[1]):
        a, u = int(tools[m, h]), int(tmpls[m, h])
        if (prev, a) not in seen:
          seen.add((prev, a))
          self.tau[prev][a] = min(hi, self.tau[prev][a] + alpha * scores[m])
          self.tau_param[a][u] = min(hi, self.tau_param[a][u] + HP["arg_alpha"] * scores[m])
          if self.fused:
            mem = self.memory[(prev, a)]
            mem.append((emb[m].copy(), float(scores[m])))
            if len(mem) > MAX_MEMORY_PER_EDGE:
              mem.pop(0)
        prev = a


# ------------------------------------------------------------------------------------------------


def _time(fn, reps: int) -> float:
  """Best wall-clock milliseconds of fn() over reps calls, after one warm-up call.

  The minimum, not the mean: on a shared machine the other load only ever adds time.
  """
  fn()
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return 1e3 * float(np.min(times))


def _bench(n: int, fused: bool, reps: int, prefill: int) -> dict:
  edge_mask, template_mask, logits_np, (keys_np, task_np) = _problem(n)
  emb_np = keys_np[task_np]   # the Python baseline stores embeddings
  rng = np.random.default_rng(1)
  scores_np = rng.random(M).astype(np.float32)

  # JAX.
  sample_fn, update_fn, iter_fn = _jax_fns(n, fused)
  tmask = jnp.asarray(template_mask)
  logits, scores = jnp.asarray(logits_np), jnp.asarray(scores_np)
  emb = (jnp.asarray(keys_np), jnp.asarray(task_np))
  holder = {"state": ph.init_pheromone(n, TM, tau_init=TAU0, tau_min=HP["tau_min"],
                                       tau_max=HP["tau_max"], template_mask=tmask,
                                       bank_per_edge=16 if n <= 1024 else 2, edge_mask=edge_mask),
            "key": jax.random.key(0)}

  def jax_iter():
    holder["key"], k = jax.random.split(holder["key"])
    holder["state"], tools = iter_fn(holder["state"], k, logits, emb, scores, tmask)
    return tools

  for _ in range(prefill):  # fill the bank so the fused look-ups have evidence
    jax_iter()
  jax.block_until_ready(holder["state"])
  tools, tmpl = sample_fn(holder["state"], holder["key"], logits, emb, tmask)

  def jax_sample():
    jax.block_until_ready(sample_fn(holder["state"], holder["key"], logits, emb, tmask))

  def jax_update():
    holder["state"] = update_fn(holder["state"], tools, tmpl, scores, emb)
    jax.block_until_ready(holder["state"])

  def jax_total():
    jax.block_until_ready(jax_iter())

  # Python.
  dp = DictPheromone(edge_mask, template_mask, fused)
  prng = np.random.default_rng(2)
  for _ in range(prefill):
    t, u = dp.sample(prng, logits_np, emb_np, n)
    dp.update(t, u, scores_np, emb_np, n)
  t_np, u_np = dp.sample(prng, logits_np, emb_np, n)

  def py_total():
    t, u = dp.sample(prng, logits_np, emb_np, n)
    dp.update(t, u, scores_np, emb_np, n)

  out = {}
  for name, py_fn, jx_fn in [
      ("sampling", lambda: dp.sample(prng, logits_np, emb_np, n), jax_sample),
      ("update", lambda: dp.update(t_np, u_np, scores_np, emb_np, n), jax_update),
      ("total", py_total, jax_total)]:
    py_ms, jax_ms = _time(py_fn, reps), _time(jx_fn, reps)
    out[name] = {"python_ms": py_ms, "jax_ms": jax_ms, "ratio": py_ms / jax_ms}
  out["python_edges"] = int(sum(len(r) for r in dp.tau.values()))
  return out


def run(quick: bool = False) -> dict:
  """Runs the benchmark and prints a table; returns {'N=381/agnostic': {...}, ...}.

  Each entry maps 'sampling', 'update', 'total' to {'python_ms', 'jax_ms', 'ratio'}
  (ratio = python_ms / jax_ms, > 1 when JAX is faster) and 'python_edges' to the size of the
  dictionary baseline. `quick` uses fewer repetitions (for smoke tests).
  """
  reps, prefill = (2, 2) if quick else (7, 20)
  results = {}
  header = f"{'case':<22}{'part':<10}{'python ms':>11}{'jax ms':>10}{'python/jax':>12}"
  print(f"PhGPO pheromone benchmark: M x H = {M} x {H}, K = {K}, D = {D}, "
        f"{jax.devices()[0].platform} backend")
  print(header)
  for n in (381, 4096):
    for fused in (False, True):
      name = f"N={n}/{'fused' if fused else 'agnostic'}"
      r = _bench(n, fused, reps, prefill)
      results[name] = r
      for part in ("sampling", "update", "total"):
        v = r[part]
        print(f"{name:<22}{part:<10}{v['python_ms']:>11.2f}{v['jax_ms']:>10.2f}"
              f"{v['ratio']:>11.1f}x")
  results["top_k_similar"] = _bench_top_k_similar(reps)
  results["hot_edges"] = _bench_hot_edges(reps)
  return results


def _same_then_time(fast, slow, args, reps: int) -> tuple[float, float]:
  """Asserts fast(*args) and slow(*args) give the same arrays (the same selection, the same numbers), then
  returns their best milliseconds per call (`_time`)."""
  for a, c in zip(fast(*args), slow(*args)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(c))
  return (_time(lambda: jax.block_until_ready(fast(*args)), reps),
          _time(lambda: jax.block_until_ready(slow(*args)), reps))


def _pairwise_rank_selection(evid, s, k: int):
  """The baseline: each entry's rank among the more similar entries of its edge by pairwise comparison,
  O(B N M^2) (what `phgpo.memory_bank.dependent_pheromone` did before it used lax.top_k)."""
  m = s.shape[-1]
  sm = jnp.where(evid, s, -jnp.inf)
  slot = jnp.arange(m)
  ahead = (sm[..., None, :] > sm[..., :, None]) | (
      (sm[..., None, :] == sm[..., :, None]) & (slot[None, :] < slot[:, None]))
  return evid & (jnp.sum(ahead & evid[..., None, :], axis=-1) < k)


def _bench_top_k_similar(reps: int) -> dict:
  """`dependent_pheromone` with top_k_similar = 16 < M = 64 (the retrieval table's bank, B = 80 rollouts,
  N = 381 tools) against the same call with the pairwise-rank selection."""
  b, n, m, k = 80, 381, 64, 16
  rng = np.random.default_rng(0)
  st = type("S", (), {})()
  st.bank_task = jnp.asarray(rng.integers(-1, 500, size=(n + 1, n, m)), jnp.int32)
  st.bank_score = jnp.asarray(rng.random((n + 1, n, m)), jnp.float32)
  prev = jnp.asarray(rng.integers(0, n + 1, size=b), jnp.int32)
  sim = jnp.asarray(np.round(rng.random((b, 500)), 2), jnp.float32)
  kw = dict(kappa=KAPPA, top_k_similar=k, sim_threshold=0.3, tau_min=0.01, tau_max=10.0, dep_units="tau_range")
  fast = jax.jit(lambda p, x: memory_bank.dependent_pheromone(st, p, x, **kw))

  def slow_fn(p, x):
    ids = edges.take_rows(st.bank_task, p)
    score = edges.take_rows(st.bank_score, p)
    s = jnp.take_along_axis(x, jnp.clip(ids, 0, x.shape[1] - 1).reshape(b, n * m), axis=1).reshape(b, n, m)
    evid = _pairwise_rank_selection((ids >= 0) & (s > 0) & (s >= 0.3), s, k)
    ws = jnp.where(evid, s, 0.0)
    s_sum = jnp.sum(ws, axis=-1)
    qbar = jnp.where(s_sum > 0, jnp.sum(ws * score, axis=-1) / jnp.where(s_sum > 0, s_sum, 1.0), 0.0)
    return s_sum / (s_sum + KAPPA), 0.01 + jnp.clip(qbar, 0.0, 1.0) * (10.0 - 0.01)

  fast_ms, slow_ms = _same_then_time(fast, jax.jit(slow_fn), (prev, sim), reps)
  print(f"dependent_pheromone, B={b} N={n} M={m} top_k_similar={k}: pairwise rank {slow_ms:.1f} ms, "
        f"lax.top_k {fast_ms:.1f} ms, ratio {slow_ms / fast_ms:.1f}x")
  return {"pairwise_ms": slow_ms, "top_k_ms": fast_ms, "ratio": slow_ms / fast_ms}


def _bench_hot_edges(reps: int) -> dict:
  """`dependent_pheromone` with top_k_similar = 16 < M = 64 on a bank shaped like the retrieval table's gold
  bank (B = 80 rollouts, N = 381 tools: a few edges per tool hold entries, at most 3 leaving a tool hold more
  than 16, 25 leaving START), ranking only each row's hot edges (`hot_edges` from
  `memory_bank.hot_edge_counts`, as the rollout driver passes it) against ranking every edge (hot_edges=None,
  the baseline); both give the same numbers (asserted). One call at steps 2.. (prev = tools) and at step 1
  (prev = START) is timed for each."""
  b, n, m, k, num_tasks = 80, 381, 64, 16, 1600
  rng = np.random.default_rng(1)
  bank_task = np.full((n + 1, n, m), -1, np.int32)
  for i in range(n + 1):
    heavy = 25 if i == n else int(rng.integers(0, 4))
    for r, j in enumerate(rng.choice(n, size=heavy + 6, replace=False)):
      size = int(rng.integers(k + 1, m + 1)) if r < heavy else int(rng.integers(1, k + 1))
      bank_task[i, j, :size] = rng.choice(num_tasks, size=size, replace=False)
  st = type("S", (), {})()
  st.bank_task = jnp.asarray(bank_task)
  st.bank_score = jnp.asarray(-np.sort(-rng.random((n + 1, n, m)), axis=-1), jnp.float32)
  sim = jnp.asarray(np.round(rng.random((b, num_tasks)), 2), jnp.float32)
  counts = np.asarray(memory_bank.hot_edge_counts(st.bank_task, k))
  kw = dict(kappa=KAPPA, top_k_similar=k, sim_threshold=0.3, tau_min=0.01, tau_max=10.0, dep_units="tau_range")
  out = {}
  for label, prev in (("tools", rng.integers(0, n, size=b)), ("START", np.full(b, n))):
    bound = memory_bank.hot_edge_bucket(int(counts[prev].max()), n)
    hot = jax.jit(lambda p, x, d=bound: memory_bank.dependent_pheromone(st, p, x, hot_edges=d, **kw))
    every = jax.jit(lambda p, x: memory_bank.dependent_pheromone(st, p, x, **kw))
    hot_ms, every_ms = _same_then_time(hot, every, (jnp.asarray(prev, jnp.int32), sim), reps)
    print(f"dependent_pheromone, B={b} N={n} M={m} top_k_similar={k}, prev = {label} (hot_edges {bound}): "
          f"every edge {every_ms:.1f} ms, hot edges {hot_ms:.1f} ms, ratio {every_ms / hot_ms:.1f}x")
    out[label] = {"every_edge_ms": every_ms, "hot_edges_ms": hot_ms, "ratio": every_ms / hot_ms,
                  "hot_edges": bound}
  return out


def main() -> None:
  _cli.main(run, __doc__)


if __name__ == "__main__":
  main()

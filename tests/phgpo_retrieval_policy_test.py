"""The retrieval-augmented policy (phgpo.retrieval_policy): the untrained policy is the 3-neighbour vote, training
queries never see their own leakage group, and the gates and the MLP train."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest
import pytest

from phgpo import retrieval
from phgpo import retrieval_policy

pytestmark = pytest.mark.fast   # tiny shapes, no processes

N_TOOLS, H, D = 9, 6, 8


def _problem(seed=0, tasks=30, train=20):
  """Random embeddings, and gold chains drawn from four template chains (so chains repeat, as in TRAJECT)."""
  rng = np.random.default_rng(seed)
  emb = rng.normal(size=(tasks, D)).astype(np.float32)
  templates = [rng.integers(0, N_TOOLS, size=int(rng.integers(2, H + 1))) for _ in range(4)]
  chains = [templates[i % 4] for i in range(tasks)]
  gold = np.full((tasks, H), -1, np.int32)
  for i, c in enumerate(chains):
    gold[i, :len(c)] = c
  gold_len = np.array([len(c) for c in chains], np.int32)
  calls = [[types.SimpleNamespace(name=f"t{x}") for x in c] for c in chains]
  task_objs = [types.SimpleNamespace(domain="d", calls=c) for c in calls]
  return emb, gold, gold_len, np.arange(train, dtype=np.int64), task_objs


def _policy(mode="task", **kw):
  emb, gold, gold_len, train_idx, task_objs = _problem()
  tool_emb = np.random.default_rng(1).normal(size=(N_TOOLS, D)).astype(np.float32)
  groups = retrieval.leakage_groups(task_objs, mode=mode)
  pol = retrieval_policy.RetrievalMLPPolicy(tool_emb, emb, gold, gold_len, train_idx, groups, hidden=16,
                                            max_steps=H, **kw)
  return pol, emb, gold, gold_len, train_idx, groups


class RetrievalPolicyTest(absltest.TestCase):

  def test_untrained_policy_is_the_three_neighbour_vote(self):
    pol, emb, gold, gold_len, train_idx, _ = _policy(vote_scale=4.0)
    params = pol.init(jax.random.key(0))
    rows = np.arange(20, 30)                    # held-out tasks
    nb_tools, nb_len, nb_w = pol.neighbours(rows)
    pred, _ = retrieval.vote_decode(jnp.asarray(nb_tools[:, :3]), jnp.asarray(nb_len[:, :3]),
                                    jnp.asarray(nb_w[:, :3]), jnp.asarray(gold_len[rows]), num_tools=N_TOOLS)
    pred = np.asarray(pred)
    hist = np.random.default_rng(2).integers(0, N_TOOLS, size=(len(rows), H)).astype(np.int32)  # any history
    apply = jax.jit(pol.apply)   # one compile for every step (the same shapes)
    for t in range(H):
      batch = pol.featurize(rows, hist, np.zeros_like(hist), np.full((len(rows),), t, np.int32))
      logits = np.asarray(apply(params, batch))
      votes = np.asarray(retrieval.position_votes(batch.nb_tools[:, :3], batch.nb_len[:, :3],
                                                  batch.nb_weight[:, :3], batch.base.step, num_tools=N_TOOLS))
      np.testing.assert_allclose(logits, 4.0 * votes, rtol=1e-6, atol=1e-6)
      has = votes.max(axis=1) > 0
      live = has & (t < gold_len[rows])
      np.testing.assert_array_equal(logits[live].argmax(axis=1), pred[live, t])

  def test_training_queries_never_see_their_own_group(self):
    for mode in ("task", "chain"):
      pol, _, _, _, train_idx, groups = _policy(mode)
      rows = pol.nb_rows[train_idx]
      self.assertTrue(np.all(rows >= 0))
      self.assertFalse(np.any(groups[rows] == groups[train_idx][:, None]), mode)
      if mode == "task":
        self.assertFalse(np.any(rows == train_idx[:, None]))
    # leave-chain-out on chains that repeat every 4 tasks: a training query's neighbours are other chains
    pol, _, gold, _, train_idx, _ = _policy("chain")
    for i in train_idx:
      for j in pol.nb_rows[i]:
        self.assertFalse(np.array_equal(gold[i], gold[j]))

  def test_gates_and_mlp_receive_gradients(self):
    pol, _, gold, gold_len, train_idx, _ = _policy()
    params = pol.init(jax.random.key(0))
    rows = train_idx[:8]
    batch = pol.featurize(rows, gold[rows], np.zeros_like(gold[rows]), np.ones((8,), np.int32))
    labels = jnp.asarray(np.maximum(gold[rows, 1], 0))

    def loss(p):
      return optax.softmax_cross_entropy_with_integer_labels(pol.apply(p, batch), labels).mean()

    grad = jax.jit(jax.grad(loss))
    g = grad(params)
    self.assertGreater(float(jnp.abs(g["mlp_scale"])), 0.0)
    self.assertGreater(float(jnp.abs(g["gate_bias"]).sum()), 0.0)
    # the MLP's own weights get none until mlp_scale moves off 0 (ReZero-style), then they do
    params = dict(params, mlp_scale=jnp.asarray(0.5, jnp.float32))
    g = grad(params)
    self.assertGreater(float(sum(jnp.abs(x).sum() for x in jax.tree.leaves(g["scorer"]))), 0.0)

  def test_bad_settings_are_named(self):
    with self.assertRaisesRegex(ValueError, "policy.vote_ks"):
      _policy(vote_ks=(0, 3))
    with self.assertRaisesRegex(ValueError, "policy.vote_ks asks for 50"):
      _policy(vote_ks=(50,))
    with self.assertRaisesRegex(ValueError, "policy.leakage"):
      retrieval_policy.leakage_mode("loo", "random")
    self.assertEqual(retrieval_policy.leakage_mode("auto", "chain"), "chain")
    self.assertEqual(retrieval_policy.leakage_mode("auto", "random"), "task")


if __name__ == "__main__":
  absltest.main()


class GoldBankTest(absltest.TestCase):

  def _setup(self, per_edge):
    import ml_collections
    from phgpo import pheromone as pher_lib
    from phgpo import steps
    emb, gold, gold_len, train_idx, task_objs = _problem()
    problem = types.SimpleNamespace(train_idx=train_idx, gold_tools=gold, gold_len=gold_len, tasks=task_objs,
                                    split="chain", graph=types.SimpleNamespace(start_index=N_TOOLS))
    pher = pher_lib.init_pheromone(N_TOOLS, 2, tau_init=0.5, tau_min=0.1, tau_max=1.0,
                                   template_mask=jnp.ones((N_TOOLS, 2), bool), bank_per_edge=per_edge)
    cfg = ml_collections.ConfigDict(dict(pheromone=dict(bank_leakage="auto")))
    return steps, problem, pher, cfg, emb

  def test_gold_seed_writes_every_gold_edge_and_leaves_tau(self):
    steps, problem, pher, _, _ = self._setup(per_edge=32)
    seeded = steps.seed_bank_from_gold(pher, problem)
    np.testing.assert_array_equal(np.asarray(seeded.tau), np.asarray(pher.tau))
    bank_task, bank_score = np.asarray(seeded.bank_task), np.asarray(seeded.bank_score)
    for i in problem.train_idx:
      prev = N_TOOLS
      for t in range(problem.gold_len[i]):
        nxt = problem.gold_tools[i, t]
        self.assertIn(i, bank_task[prev, nxt], (i, t))
        self.assertEqual(bank_score[prev, nxt][list(bank_task[prev, nxt]).index(i)], 1.0)
        prev = nxt
    held_out = set(range(20, 30))
    self.assertFalse(held_out & set(bank_task[bank_task >= 0].tolist()))

  def test_masked_similarity_hides_the_readers_chain(self):
    from phgpo import memory_bank
    steps, problem, _, cfg, emb = self._setup(per_edge=4)
    groups = steps.bank_groups(cfg, problem)       # 'auto' on the chain split: leave-chain-out
    rows = np.arange(12)
    sim = np.asarray(memory_bank.masked_bank_similarity(jnp.asarray(emb), jnp.asarray(emb[rows]),
                                                        jnp.asarray(groups), jnp.asarray(groups[rows])))
    full = np.asarray(memory_bank.bank_similarity(jnp.asarray(emb), jnp.asarray(emb[rows])))
    same = groups[rows][:, None] == groups[None, :]
    np.testing.assert_array_equal(sim[same], 0.0)
    np.testing.assert_allclose(sim[~same], full[~same], rtol=1e-6)
    cfg.pheromone.bank_leakage = "none"
    self.assertIsNone(steps.bank_groups(cfg, problem))
    cfg.pheromone.bank_leakage = "own"
    with self.assertRaisesRegex(ValueError, "pheromone.bank_leakage"):
      steps.bank_groups(cfg, problem)

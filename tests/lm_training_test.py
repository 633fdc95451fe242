"""Sharded training in every trainer (common.lm.training): one update step on the (data, fsdp, tensor) meshes
(8, 1, 1) and (2, 2, 2) of 8 fake CPU devices (tests/conftest.py) equals the single-device step to 1e-5, with
LoRA and with full fine-tuning, for ProgAgent's sft_update / gspo_update, PlanPO's sft_update / rl_update and
the PhGPO LM policy's update; strided gradient accumulation equals one pass; remat equals no remat; bfloat16
parameters with float32 master weights keep float32 optimizer state and match a float32 reference within
bfloat16 rounding."""

import functools
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest, parameterized

from common import checkpoint as ckpt_lib
from common.lm import lora as lora_lib
from common.lm import testing as lm_testing
from common.lm import training
from common.lm import updates as kit
from common.lm.config import ModelConfig

CFG = ModelConfig(family="qwen2", vocab_size=128, hidden_size=32, intermediate_size=64, num_layers=2,
                  num_heads=4, num_kv_heads=2, head_dim=8)
ROWS, LENGTH = 8, 16
MESHES = {"single": (1, 1, 1), "data8": (8, 1, 1), "cube": (2, 2, 2)}
CASES = [dict(testcase_name=f"{m}_{'lora' if l else 'full'}", mesh=m, lora=l) for m in ("data8", "cube")
         for l in (False, True)]


def _mesh(name):
  return training.mesh_from_config({"shape": MESHES[name]})


@functools.lru_cache(maxsize=None)
def _model(lora: bool, remat: str = "none", param_dtype: str = "float32"):
  """(config, host params): random base weights; LoRA adapters with a non-zero B so both A and B move."""
  cfg = CFG.replace(remat=remat, param_dtype=param_dtype)
  params = jax.tree.map(np.asarray, lm_testing.random_params(CFG, seed=0))
  if lora:
    cfg = cfg.with_lora(rank=4, alpha=8.0, targets=("q_proj", "v_proj", "up_proj"))
    params = lora_lib.add_adapters(jax.random.key(1), params, cfg)
    rng = np.random.default_rng(2)
    params = jax.tree_util.tree_map_with_path(
        lambda p, x: (rng.normal(size=x.shape) * 0.05).astype(np.float32) if lora_lib.is_adapter_path(p)
        and str(p[-1].key) == "lora_b" else np.asarray(x), params)
  params = jax.tree.map(lambda x: np.asarray(x, np.float32).astype(jnp.dtype(param_dtype)), params)
  return cfg, params


def _data(seed: int = 0):
  rng = np.random.default_rng(seed)
  tok = rng.integers(1, CFG.vocab_size, size=(ROWS, LENGTH)).astype(np.int32)
  attn = np.ones((ROWS, LENGTH), bool)
  attn[5:, 12:] = False
  pol = np.zeros((ROWS, LENGTH), bool)
  for i in range(ROWS):
    pol[i, 4:5 + i % 7] = True
  pol[6] = False          # a row without policy tokens
  pol &= attn
  adv = rng.normal(size=(ROWS,)).astype(np.float32)
  return tok, attn, pol, adv


def _host(tree):
  return jax.tree.map(lambda x: np.asarray(jax.device_get(x), np.float32), tree)


def _close(test, a, b, tol=1e-5):
  for (path, x), y in zip(jax.tree_util.tree_flatten_with_path(a)[0], jax.tree.leaves(b)):
    np.testing.assert_allclose(x, y, rtol=tol, atol=tol, err_msg=jax.tree_util.keystr(path))


# --- ProgAgent -------------------------------------------------------------------------------------------

def _progagent(kind: str, mesh: str, lora: bool, *, micro: int = 1, remat: str = "none",
               param_dtype: str = "float32", master: bool = False, params=None):
  from progagent import updates
  cfg, p0 = _model(lora, remat, param_dtype)
  params = p0 if params is None else params
  optim = kit.OptimSettings(1e-2, 1.0, 0.01, 0.9, 0.999, 1e-8, lora, master)
  m, rules = _mesh(mesh)
  state = kit.init_state(params, optim, key=0, mesh=m, rules=rules, commit=False)
  tok, attn, pol, adv = _data()
  if kind == "sft":
    new, met = kit.sft_update(state, *training.place_batch((tok, attn, pol), m, rules), model=cfg, optim=optim,
                              micro=micro)
  else:
    lp = np.asarray(kit.score(jax.tree.map(jnp.asarray, p0), tok, attn, model=cfg))
    lp = np.where(pol, lp + 0.02 * np.random.default_rng(3).normal(size=lp.shape), 0.0).astype(np.float32)
    batch = training.place_batch(updates.Batch(tok, attn, pol, lp, adv), m, rules)
    new, met = updates.gspo_update(state, batch, model=cfg, optim=optim, micro=micro, temperature=1.0,
                                   clip_low=0.2, clip_high=0.2)
  return new.params, new.opt_state, jax.device_get(met), state


@functools.lru_cache(maxsize=None)
def _progagent_ref(kind: str, lora: bool):
  p, _, met, _ = _progagent(kind, "single", lora)
  return _host(p), met


class ProgAgentShardedTest(parameterized.TestCase):

  @parameterized.named_parameters(*CASES)
  def test_sft_step_sharded_equals_single_device(self, mesh, lora):
    p, _, met, state = _progagent("sft", mesh, lora)
    ref_p, ref_m = _progagent_ref("sft", lora)
    _close(self, _host(p), ref_p)
    np.testing.assert_allclose(met["loss"], ref_m["loss"], rtol=1e-5)
    np.testing.assert_allclose(met["grad_norm"], ref_m["grad_norm"], rtol=1e-5)
    emb = state.params["embed"]
    self.assertLen(emb.sharding.device_set, 8)

  @parameterized.named_parameters(*CASES)
  def test_gspo_step_sharded_equals_single_device(self, mesh, lora):
    p, _, met, _ = _progagent("gspo", mesh, lora)
    ref_p, ref_m = _progagent_ref("gspo", lora)
    _close(self, _host(p), ref_p)
    for k in ("loss", "ratio_mean", "grad_norm"):
      np.testing.assert_allclose(met[k], ref_m[k], rtol=1e-5, atol=1e-6, err_msg=k)

  @parameterized.parameters("sft", "gspo")
  def test_accumulation_equals_one_pass(self, kind):
    p, _, met, _ = _progagent(kind, "cube", True, micro=2)
    ref_p, ref_m = _progagent_ref(kind, True)
    _close(self, _host(p), ref_p)
    np.testing.assert_allclose(met["loss"], ref_m["loss"], rtol=1e-5, atol=1e-6)

  def test_gspo_updates_pad_minibatches_to_the_mesh(self):
    from progagent import updates
    cfg, p0 = _model(True)
    optim = kit.OptimSettings(1e-2, 1.0, 0.0, 0.9, 0.999, 1e-8, True, False)
    tok, attn, pol, adv = _data()
    lp = np.where(pol, -2.0, 0.0).astype(np.float32)
    batch = updates.Batch(tok[:6], attn[:6], pol[:6], lp[:6], adv[:6])   # minibatches of 3 rows: padded to 8
    kw = dict(model=cfg, optim=optim, minibatches=2, epochs=1, micro_batch_size=0, temperature=1.0,
              clip_low=0.2, clip_high=0.2, logp_old="sampler", perm_seed=(0,))
    out = {}
    for name in ("single", "data8"):
      m, rules = _mesh(name)
      state = kit.init_state(p0, optim, key=0, mesh=m, rules=rules)
      st, ms = updates.gspo_updates(state, batch, mesh=None if name == "single" else m, rules=rules, **kw)
      out[name] = (_host(st.params), ms)
    _close(self, out["data8"][0], out["single"][0])
    for a, b in zip(out["data8"][1], out["single"][1]):
      np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-5, atol=1e-6)

  def test_remat_equals_no_remat(self):
    p, _, met, _ = _progagent("sft", "data8", False, remat="full")
    ref_p, ref_m = _progagent_ref("sft", False)
    _close(self, _host(p), ref_p)
    np.testing.assert_allclose(met["loss"], ref_m["loss"], rtol=1e-5)

  @parameterized.parameters(False, True)
  def test_bf16_params_with_f32_master_weights(self, lora):
    _, p16 = _model(lora, "none", "bfloat16")
    # the float32 reference starts from the same (bfloat16-representable) values
    p32 = jax.tree.map(lambda x: np.asarray(x, np.float32), p16)
    p, o, met, state = _progagent("sft", "cube", lora, param_dtype="bfloat16", master=True)
    ref, _, ref_m, _ = _progagent("sft", "single", lora, params=p32)
    self.assertIsInstance(o, training.MasterState)
    for x in jax.tree.leaves(p):
      self.assertEqual(x.dtype, jnp.bfloat16)
    for x in jax.tree.leaves(o):
      if jnp.issubdtype(x.dtype, jnp.floating):
        self.assertEqual(x.dtype, jnp.float32)
    masters = [x for x in jax.tree.leaves(o.master)]
    self.assertLen(masters, len(jax.tree.leaves(lora_lib.partition(p16, extra=())[0])) if lora
                   else len(jax.tree.leaves(p16)))
    # master weights equal the float32 step; the bf16 params are them rounded
    flat_m = {jax.tree_util.keystr(k): v for k, v in jax.tree_util.tree_flatten_with_path(o.master)[0]}
    for (k, r), (_, x) in zip(jax.tree_util.tree_flatten_with_path(_host(ref))[0],
                              jax.tree_util.tree_flatten_with_path(_host(p))[0]):
      if jax.tree_util.keystr(k) in flat_m:
        # the gradient of a bfloat16 parameter is rounded to bfloat16 (relative 2^-8) before Adam
        np.testing.assert_allclose(np.asarray(flat_m[jax.tree_util.keystr(k)]), r, rtol=2 ** -8, atol=1e-4)
      np.testing.assert_allclose(x, r, rtol=2 ** -7, atol=1e-4, err_msg=jax.tree_util.keystr(k))
    np.testing.assert_allclose(met["loss"], ref_m["loss"], rtol=1e-5)
    if lora:   # the state with its master weights goes through a checkpoint and back, shardings kept
      st = state.replace(params=p, opt_state=o)
      ck = ckpt_lib.Checkpointer(self.create_tempdir().full_path)
      ck.save(1, st)
      back = ck.restore(1, state)
      ck.close()
      _close(self, _host(back), _host(st), tol=0)
      self.assertEqual(back.opt_state.master["layers"]["attn"]["q_proj"]["lora_a"].sharding,
                       state.opt_state.master["layers"]["attn"]["q_proj"]["lora_a"].sharding)


# --- PlanPO ----------------------------------------------------------------------------------------------

def _planpo(kind: str, mesh: str, lora: bool, *, micro_rows: int = 0):
  from planpo import train
  cfg, p0 = _model(lora)
  m, rules = _mesh(mesh)
  optim = kit.OptimSettings(1e-2, 1.0, adapters_only=lora)
  state = kit.init_state(p0, optim, key=0, mesh=m, rules=rules)
  tok, attn, pol, adv = _data(1)
  if kind == "sft":
    n, rows = kit.micro_layout(ROWS, micro_rows, training.batch_shards(m, rules))
    arrays = training.place_batch(kit.pad_batch([tok, attn, pol], rows, masked=(2,)), m, rules)
    state, met = kit.sft_update(state, *arrays, model=cfg, optim=optim, micro=n)
  else:
    lp = np.asarray(kit.score(jax.tree.map(jnp.asarray, p0), tok, attn, model=cfg, temperature=1.0))
    lp_old = (lp + 0.03 * np.random.default_rng(4).normal(size=lp.shape)).astype(np.float32)
    kw = tuple(sorted(dict(clip_low=0.2, clip_high=0.2, kl_coef=0.01, agg_mode="token_mean", ratio="token").items()))
    state, met = train.rl_update(state, tok, attn, pol, lp_old, lp_old - 0.1, adv, model=cfg, optim=optim,
                                 temperature=1.0, loss_kw=kw, micro_rows=micro_rows or ROWS, mesh=m, rules=rules)
  return _host(state.params), jax.device_get(met)


@functools.lru_cache(maxsize=None)
def _planpo_ref(kind: str, lora: bool):
  return _planpo(kind, "single", lora)


class PlanPOShardedTest(parameterized.TestCase):

  @parameterized.named_parameters(*CASES)
  def test_sft_step_sharded_equals_single_device(self, mesh, lora):
    p, met = _planpo("sft", mesh, lora)
    ref_p, ref_m = _planpo_ref("sft", lora)
    _close(self, p, ref_p)
    np.testing.assert_allclose(met["loss"], ref_m["loss"], rtol=1e-5)

  @parameterized.named_parameters(*CASES)
  def test_rl_step_sharded_equals_single_device(self, mesh, lora):
    p, met = _planpo("rl", mesh, lora)
    ref_p, ref_m = _planpo_ref("rl", lora)
    _close(self, p, ref_p)
    for k in ("loss", "kl", "grad_norm"):
      np.testing.assert_allclose(met[k], ref_m[k], rtol=1e-5, atol=1e-6, err_msg=k)

  @parameterized.parameters("sft", "rl")
  def test_accumulation_equals_one_pass(self, kind):
    p, met = _planpo(kind, "cube", False, micro_rows=3)   # 8 rows -> 3 strided micro-batches of 4 (padded)
    ref_p, ref_m = _planpo_ref(kind, False)
    _close(self, p, ref_p)
    np.testing.assert_allclose(met["loss"], ref_m["loss"], rtol=1e-5, atol=1e-6)


# --- PhGPO's LM policy -----------------------------------------------------------------------------------

TOOLS = ("search_flights", "book_hotel", "get_weather")


@functools.lru_cache(maxsize=None)
def _tiny_checkpoint():
  import tempfile
  path = tempfile.mkdtemp(prefix="lm-training-test-")
  lm_testing.make_tiny_checkpoint(path, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                                  intermediate_size=64, tokenizer_vocab=128, extra_text=TOOLS)
  return path


def _phgpo(mesh: str, lora: bool, *, micro: int = 1, remat: str = "none"):
  from configs import phgpo_traject
  from phgpo import lm_policy, steps
  from phgpo import lm_tool_policy as tool_policy
  m, rules = _mesh(mesh)
  lm = tool_policy.LMToolPolicy(_tiny_checkpoint(), list(TOOLS), lora_rank=4 if lora else 0, lora_alpha=8.0,
                                max_length=32, remat=remat, mesh=m, rules=rules)
  queries = ["fly to paris", "a hotel in rome", "weather in oslo", "flights and a hotel"]
  policy = lm_policy.PhGPOLMPolicy(lm, queries, list(TOOLS))
  c = phgpo_traject.get_config("smoke_lm")
  c.policy.micro_batches = micro
  n = len(TOOLS)
  graph = types.SimpleNamespace(tool_names=list(TOOLS), start_index=n, template_mask=np.ones((n, 2), bool),
                                edge_mask=np.ones((n + 1, n), bool))
  problem = types.SimpleNamespace(graph=graph, query_emb=np.eye(4, 8, dtype=np.float32))
  compiled = steps.Compiled(c, policy, problem)
  state = steps.place(steps.init_state(c, policy, problem, seed=0, learning_rate=1e-2), policy)
  b, h = 4, 2
  tools = np.array([[0, 1], [2, -1], [1, 0], [0, 2]], np.int32)
  obs = [["ok", "done"], ["sunny", ""], ["booked", "ok"], ["ok", "ok"]]
  flat = policy.featurize(np.repeat(np.arange(b), h), np.repeat(np.maximum(tools, 0), h, axis=0),
                          np.zeros((b * h, h), np.int32), np.tile(np.arange(h, dtype=np.int32), b),
                          [o for o in obs for _ in range(h)])
  rng = np.random.default_rng(5)
  logp_old = np.log(np.full((b, h), 1.0 / n, np.float32)) + 0.05 * rng.normal(size=(b, h)).astype(np.float32)
  pg = tools >= 0
  sl = np.zeros((b, h), bool)
  sl[0, 0] = True
  args = (flat, jnp.asarray(np.maximum(tools, 0)), jnp.asarray(logp_old), jnp.asarray(rng.normal(size=(b,)),
          jnp.float32), jnp.asarray(pg), jnp.asarray(sl))
  rest = (jnp.asarray(logp_old), jnp.asarray(np.maximum(tools, 0)), jnp.ones((b, h), jnp.float32))
  args = (compiled.place_rows(args[0]),) + tuple(compiled.place_rows(a) for a in args[1:])
  rest = tuple(compiled.place_rows(a) for a in rest)
  p, _, aux = compiled.rl_update(state.params, state.opt_state, *args, *rest, jnp.float32(0.3), jnp.float32(0.01))
  return _host(p), jax.device_get(aux), state


@functools.lru_cache(maxsize=None)
def _phgpo_ref(lora: bool):
  p, aux, _ = _phgpo("single", lora)
  return p, aux


class PhGPOShardedTest(parameterized.TestCase):

  @parameterized.named_parameters(*CASES)
  def test_rl_update_sharded_equals_single_device(self, mesh, lora):
    p, aux, state = _phgpo(mesh, lora)
    ref_p, ref_aux = _phgpo_ref(lora)
    _close(self, p, ref_p)
    np.testing.assert_allclose(aux["loss"], ref_aux["loss"], rtol=1e-5, atol=1e-6)
    self.assertLen(state.params["lm"]["embed"].sharding.device_set, 8)

  def test_micro_batches_and_remat_equal_one_pass(self):
    p, aux, _ = _phgpo("cube", True, micro=3, remat="full")   # 8 rows in 3 micro-batches (padded to 9)
    ref_p, ref_aux = _phgpo_ref(True)
    _close(self, p, ref_p)
    np.testing.assert_allclose(aux["loss"], ref_aux["loss"], rtol=1e-5, atol=1e-6)


# --- the pieces ------------------------------------------------------------------------------------------

class PiecesTest(parameterized.TestCase):

  def test_micro_batches_are_strided_and_merge_back(self):
    x = jnp.arange(12 * 2).reshape(12, 2)
    mb = training.micro_batches(x, 3)
    np.testing.assert_array_equal(mb[1, :, 0], [2, 8, 14, 20])   # rows 1, 4, 7, 10
    np.testing.assert_array_equal(training.merge_micro_batches(mb), x)
    with self.assertRaisesRegex(ValueError, "micro-batches"):
      training.micro_batches(x, 5)

  def test_accumulate_grads_equals_one_pass(self):
    rng = np.random.default_rng(0)
    w = {"a": jnp.asarray(rng.normal(size=(4, 3)), jnp.float32), "b": jnp.asarray(rng.normal(size=(3,)), jnp.float32)}
    batch = (jnp.asarray(rng.normal(size=(12, 4)), jnp.float32), jnp.asarray(rng.normal(size=(12, 3)), jnp.float32))

    def loss_sum(p, b):
      return jnp.sum(jnp.tanh(b[0] @ p["a"] + p["b"]) * b[1]) ** 1, {"rows": jnp.float32(b[0].shape[0])}
    l1, g1, _ = training.accumulate_grads(loss_sum, w, batch, 1, has_aux=True)
    for n in (2, 3, 4):
      ln, gn, aux = jax.jit(lambda p, b, n=n: training.accumulate_grads(loss_sum, p, b, n, has_aux=True))(w, batch)
      np.testing.assert_allclose(ln, l1, rtol=1e-6, atol=1e-6)
      _close(self, gn, g1, tol=1e-6)
      self.assertEqual(aux["rows"].shape, (n,))

  def test_micro_batched_apply_equals_one_pass(self):
    w = jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)
    x = jnp.linspace(0.0, 2.0, 28).reshape(7, 4)
    f = lambda p, b: jnp.tanh(b @ p)
    loss = lambda p, n: jnp.sum(training.micro_batched_apply(f, p, x, n) ** 2) / jnp.sum(f(p, x))
    for n in (1, 2, 3):
      np.testing.assert_allclose(training.micro_batched_apply(f, w, x, n), f(w, x), rtol=1e-6)
      np.testing.assert_allclose(jax.grad(loss)(w, n), jax.grad(loss)(w, 1), rtol=1e-6, atol=1e-6)

  def test_mesh_from_config_and_batch_errors(self):
    mesh, rules = training.mesh_from_config(None)
    self.assertEqual(mesh.devices.size, 1)
    mesh, rules = training.mesh_from_config({"shape": (-1, 1, 1)})
    self.assertEqual(training.batch_shards(mesh, rules), 8)
    self.assertEqual(training.batch_shards(*training.mesh_from_config({"shape": (2, 2, 2)})), 4)
    with self.assertRaisesRegex(ValueError, "mesh.shape"):
      training.mesh_from_config({"shape": (4, 4, 1)})
    with self.assertRaisesRegex(ValueError, "multiple of 8"):
      training.place_batch(np.zeros((6, 3)), mesh, rules)

  def test_master_weights_state_shardings_follow_params(self):
    cfg, p = _model(True)
    mesh, rules = _mesh("cube")
    tx = lora_lib.adapter_optimizer(optax.adam(1e-3), p, extra=())
    opt = training.init_opt_state(tx, p, master_weights=True, trainable=lora_lib.trainable_mask(p, extra=()))
    sh = training.state_shardings(opt, p, mesh, rules)
    ps = __import__("common.lm.sharding", fromlist=["x"]).param_shardings(p, mesh, rules)
    a = ("layers", "attn", "q_proj", "lora_a")
    get = lambda t: t["layers"]["attn"]["q_proj"]["lora_a"]
    self.assertEqual(get(sh.master).spec, get(ps).spec)
    mu = sh.inner.inner_states["train"].inner_state[0].mu
    self.assertEqual(get(mu).spec, get(ps).spec)
    del a, cfg


class ScaleConfigTest(absltest.TestCase):
  """Typos in the scale keys are refused by check_config (before the launcher writes the workdir); the scale
  keys may change when a run resumes (another mesh, other attention blocks, KV reuse)."""

  def test_bad_scale_keys_are_named(self):
    from configs import planpo_twx
    from configs import progagent as progagent_config
    from planpo import train as planpo_train
    from progagent import train as progagent_train
    cases = [("model.attention_impl", "flash"), ("model.attention_chunk", 0), ("model.remat", "all"),
             ("model.decode_attention", "paged"),
             ("mesh.shape", (16, 1, 1)), ("mesh.shape", (0, 1, 1)), ("mesh.shape", (-1, -1, 1)),
             ("mesh.shape", (2, 2))]
    for key, value in cases:
      c = progagent_config.get_config('smoke')
      node, leaf = key.split(".")
      with c.unlocked():
        c[node][leaf] = value
      with self.assertRaisesRegex(ValueError, key.replace(".", r"\.")):
        progagent_train.check_config(c)
    c = planpo_twx.get_config("smoke")
    c.model.attention_impl = "flash"
    with self.assertRaisesRegex(ValueError, r"model\.attention_impl"):
      planpo_train.check_config(c)
    progagent_train.check_config(progagent_config.get_config('smoke'))   # the defaults pass

  def test_scale_keys_may_change_on_resume(self):
    import os
    import shutil
    import tempfile
    from configs import progagent as progagent_config
    from experiments import train as launcher
    d = tempfile.mkdtemp(prefix="scale_wd_")
    self.addCleanup(shutil.rmtree, d, True)
    launcher._check_same_config(d, progagent_config.get_config('smoke'))
    os.makedirs(os.path.join(d, "sft"))
    with open(os.path.join(d, "sft", "metrics.jsonl"), "w") as f:   # the run wrote something: a used workdir
      f.write("{}\n")
    c = progagent_config.get_config('smoke')
    with c.unlocked():
      c.mesh.shape = (-1, 1, 1)
      c.model.attention_chunk = 512
      c.gspo.kv_reuse = False
    launcher._check_same_config(d, c)
    c.sft.learning_rate = 0.5
    with self.assertRaisesRegex(ValueError, "sft.learning_rate"):
      launcher._check_same_config(d, c)


if __name__ == "__main__":
  absltest.main()

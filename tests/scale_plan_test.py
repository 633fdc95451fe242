"""benchmarks/scale_plan.py on a tiny config: exact bytes per device, XLA's argument bytes, the fit decision, the CLI.

The tiny setting is configs/progagent.py:smoke (a 'tiny:qwen2' model: width 32, 2 layers, 4 query / 2 key-value
heads) with 8 rows of 128 tokens; the published settings are only built (abstract, no compile).
"""

import dataclasses
import json
import os
import subprocess
import sys
import tempfile

from absl.testing import absltest
import jax

from benchmarks import scale_plan as sp
from common.lm import model as model_lib
from common.lm import sharding as sharding_lib
from configs import phgpo_traject as phgpo_config
from configs import progagent as progagent_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tiny_config(**changes):
  """ProgAgent's smoke config at 8 rows x 128 tokens; `changes`: 'a.b' -> value."""
  c = progagent_config.get_config("smoke")
  c.env.max_context_tokens = 128
  c.env.max_response_tokens = 8
  c.lengths.buckets = (128,)
  c.gspo.tasks_per_step, c.gspo.rollouts_per_task, c.gspo.minibatches = 2, 4, 1
  for k, v in changes.items():
    sp._set(c, k, v)  # pylint: disable=protected-access
  return c


def mesh(shape):
  n = shape[0] * shape[1] * shape[2]
  return sharding_lib.make_mesh(shape, devices=jax.devices()[:n])


class ExactBytesTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.setting = sp.build_setting(tiny_config())

  def test_setting_sizes(self):
    s = self.setting
    self.assertEqual((s.update_rows, s.update_length, s.sample_rows, s.sample_context, s.sample_new),
                     (8, 128, 8, 128, 8))
    self.assertEqual((s.model.hidden_size, s.model.num_layers, s.model.num_heads, s.model.num_kv_heads), (32, 2, 4, 2))

  def test_param_bytes_are_the_count_over_the_shards(self):
    m = self.setting.model
    whole = sp.resident_state(self.setting, mesh((1, 1, 1)))
    self.assertEqual(whole.params_bytes, m.num_params() * 4)      # float32, tied embedding counted once
    # Adam's two moments per parameter, plus the step count, the RNG key and the train step (a few bytes)
    self.assertBetween(whole.opt_bytes - 2 * whole.params_bytes, 0, 64)
    abstract = model_lib.abstract_params(m)
    logical = jax.tree.leaves(model_lib.param_logical_axes(abstract),
                              is_leaf=lambda x: isinstance(x, tuple) and all(isinstance(a, (str, type(None)))
                                                                            for a in x))
    sizes = [x.size * 4 for x in jax.tree.leaves(abstract)]
    with_embed = sum(b for b, ax in zip(sizes, logical) if "embed" in ax)   # the 'embed' dim (32) goes over fsdp
    previous = whole.params_bytes
    for f in (2, 4, 8):
      got = sp.resident_state(self.setting, mesh((1, f, 1))).params_bytes
      self.assertEqual(got, whole.params_bytes - with_embed + with_embed // f)
      self.assertLess(got, previous)            # a bigger mesh never needs more parameter bytes per device
      previous = got
    self.assertEqual(sp.resident_state(self.setting, mesh((2, 1, 1))).params_bytes, whole.params_bytes)  # replicas
    self.assertLess(sp.resident_state(self.setting, mesh((1, 1, 2))).params_bytes, whole.params_bytes)

  def test_kv_cache_bytes(self):
    m = self.setting.model
    opt = sp.SampleOption(8, False)
    per_slot = 2 * m.num_layers * m.num_kv_heads * m.head_dim * 4          # k and v, float32
    self.assertEqual(sp.kv_bytes(self.setting, mesh((1, 1, 1)), opt), (8 * 128 * per_slot,) * 2)
    self.assertEqual(sp.kv_bytes(self.setting, mesh((2, 2, 2)), opt)[0], 8 * 128 * per_slot // 8)
    # with KV reuse every block of rows stays resident
    self.assertEqual(sp.kv_bytes(self.setting, mesh((1, 1, 1)), sp.SampleOption(2, True)), (2 * 128 * per_slot,
                                                                                           8 * 128 * per_slot))
    self.assertEqual(self.setting.kv_pool_rows, 8)
    # a budget of 3 rows: the pool's blocks of 2 and 1 rows, and one block of 2 for the others' re-prefill
    pooled = dataclasses.replace(self.setting, kv_pool_rows=3)
    self.assertEqual(sp.kv_bytes(pooled, mesh((1, 1, 1)), sp.SampleOption(2, True)), (2 * 128 * per_slot,
                                                                                     5 * 128 * per_slot))
    # sample_keys 'call' (the layout before the pool): every block chunk rows, the last one padded
    self.assertEqual(sp.kv_bytes(self.setting, mesh((1, 1, 1)), sp.SampleOption(3, True))[1], 8 * 128 * per_slot)
    call = dataclasses.replace(self.setting, sample_keys="call")
    self.assertEqual(sp.kv_bytes(call, mesh((1, 1, 1)), sp.SampleOption(3, True))[1], 9 * 128 * per_slot)

  def test_ladders(self):
    self.assertEqual(sp.update_ladder(self.setting, 2), [sp.UpdateOption("none", 0), sp.UpdateOption("full", 0),
                                                         sp.UpdateOption("full", 2)])
    self.assertEqual(sp.sample_ladder(self.setting, 2), [sp.SampleOption(8, True), sp.SampleOption(4, False),
                                                         sp.SampleOption(2, False)])
    self.assertEqual(sp.mesh_shapes(4, self.setting.model), [(4, 1, 1), (1, 4, 1), (2, 1, 2), (1, 2, 2)])

  def test_published_settings_build(self):
    pa = sp.build_setting(sp.published_config("progagent"), backbone="qwen3-8b")
    self.assertEqual((pa.update_rows, pa.update_length, pa.sample_rows, pa.sample_context), (128, 32768, 512, 32768))
    # the KV pool: gspo.kv_cache_max_gb = 32 GiB holds 7 of the 512 rows of 32k bfloat16 slots (4.5 GiB each)
    self.assertTrue(pa.kv_reuse)
    self.assertEqual(pa.kv_pool_rows, 7)
    pp = sp.build_setting(sp.published_config("planpo"), backbone="qwen2.5-7b")
    self.assertEqual((pp.update_rows, pp.update_length, pp.sample_rows, pp.reference), (1280, 4096, 128, True))
    # PlanPO's sampler is one block of `env.workers` rows: fewer rows per call keep KV reuse
    self.assertEqual(sp.sample_ladder(pp, 32), [sp.SampleOption(128, True), sp.SampleOption(64, True),
                                                sp.SampleOption(32, True)])
    ph = sp.build_setting(sp.published_config("phgpo_compare"), backbone="qwen2.5-7b")
    self.assertEqual((ph.update_rows, ph.update_length, ph.sample_rows, ph.model.lora_rank), (1600, 1024, 80, 64))
    st = sp.resident_state(pa, mesh((1, 8, 1)))
    m = pa.model   # Qwen3-8B, float32: every weight but the RMSNorm scales has the 'embed' dim (4096), split 8 ways
    norms = m.num_layers * (2 * m.hidden_size + 2 * m.head_dim) + m.hidden_size
    self.assertEqual(st.params_bytes, (m.num_params() - norms) * 4 // 8 + norms * 4)
    self.assertEqual(m.num_params(), 8_190_735_360)


class CompiledTest(absltest.TestCase):

  def test_measured_rows_and_the_fit_decision(self):
    # one rung in each ladder on 2 devices: remat full, 1 row per device per micro-batch; 1 per sampler call
    setting = sp.build_setting(tiny_config(**{"model.remat": "full", "gspo.micro_batch_size": 2,
                                              "gspo.generate_batch_size": 2, "gspo.kv_reuse": False}))
    self.assertLen(sp.update_ladder(setting, 2), 1)
    self.assertLen(sp.sample_ladder(setting, 2), 1)
    m = mesh((1, 2, 1))
    st = sp.resident_state(setting, m)
    uopt, sopt = sp.update_ladder(setting, 2)[0], sp.sample_ladder(setting, 2)[0]
    u = sp.update_row(setting, st, m, uopt, donate=False, budget=float("inf"))
    s = sp.sample_row(setting, st, m, sopt, budget=float("inf"))
    self.assertTrue(u.compiled and s.compiled)
    # XLA's per-device argument bytes are the exact bytes of the sharded inputs
    _, uargs = sp._update_program(setting, st, m, uopt, False)  # pylint: disable=protected-access
    _, sargs = sp._sample_program(setting, st, m, sopt)  # pylint: disable=protected-access
    self.assertEqual(u.arguments, sp.device_bytes(uargs))
    self.assertEqual(s.arguments, sp.device_bytes(sargs))
    self.assertEqual(sp.device_bytes(uargs[0]), st.params_bytes + st.opt_bytes)      # the train state
    self.assertEqual(sp.device_bytes(sargs[1]), sp.kv_bytes(setting, m, sopt)[0])    # the KV block
    # the columns add up; the new state is not donated, so io holds a second copy of it
    self.assertEqual(u.total, u.params + u.opt + u.act + u.io)
    self.assertEqual(s.total, s.params + s.opt + s.kv + s.act + s.io)
    self.assertGreaterEqual(u.io, st.params_bytes + st.opt_bytes)
    self.assertGreater(u.act, 0)
    self.assertGreater(s.act, 0)
    # the decision flips at the budget: both programs must fit
    need = max(u.total, s.total)
    self.assertEqual(sp.first_fit([u], [s], need), (u, s))
    self.assertIsNone(sp.first_fit([u], [s], need - 1))
    skipped = sp.update_row(setting, st, m, uopt, donate=False, budget=need - u.act - u.io)
    self.assertFalse(skipped.compiled)               # its lower bound exceeds that budget: not compiled
    self.assertLessEqual(skipped.total, u.total)     # and it is a lower bound
    self.assertIsNone(sp.first_fit([skipped], [s], float("inf")))


  def test_phgpo_decision_forward_counts_every_parameter(self):
    c = phgpo_config.get_config("smoke_lm")
    c.model.checkpoint = "tiny:llama"     # untied: the LM head, which the tool policy never reads, is resident too
    setting = sp.build_setting(c)
    self.assertEqual((setting.update_rows, setting.sample_rows, setting.sample_new), (200, 10, 0))
    m = mesh((1, 1, 1))
    st = sp.resident_state(setting, m)
    opt = sp.sample_ladder(setting, 1)[0]
    row = sp.sample_row(setting, st, m, opt, budget=float("inf"))
    _, args = sp._sample_program(setting, st, m, opt)  # pylint: disable=protected-access
    self.assertEqual(row.arguments, sp.device_bytes(args))
    self.assertEqual(row.total, row.params + row.opt + row.act + row.io)
    self.assertGreaterEqual(row.io, 0)


class CommandLineTest(absltest.TestCase):

  def test_cli_on_the_tiny_config(self):
    with tempfile.TemporaryDirectory() as d:
      out = os.path.join(d, "plan.json")
      cmd = [sys.executable, "-m", "benchmarks.scale_plan", "--config=configs/progagent.py:smoke", "--nopublished",
             "--max_devices=1", "--noprogress", "--config.env.max_context_tokens=128",
             "--config.env.max_response_tokens=8", "--config.lengths.buckets=(128,)", f"--json={out}"]
      env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1")
      r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
      self.assertEqual(r.returncode, 0, r.stderr[-3000:])
      self.assertIn("smallest fitting mesh:", r.stdout)
      with open(out) as f:
        plans = json.load(f)
    self.assertLen(plans, 1)
    p = plans[0]
    self.assertEqual(p["setting"], "ProgAgent")
    model = sp.build_setting(tiny_config()).model
    for d in ("H100", "H200", "v5e"):
      self.assertEqual(p["fits"][d]["devices"], 1)
      self.assertEqual(p["fits"][d]["update"]["params"], model.num_params() * 4)


if __name__ == "__main__":
  absltest.main()

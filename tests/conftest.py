"""Test-session setup: 8 fake CPU devices for the sharding tests and a session-wide JAX compilation cache, set
before JAX starts."""
import os

_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
  os.environ["XLA_FLAGS"] = (_flags + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# One folder per test session, shared by the xdist workers (tests/shared_runs.py keeps runs that several test
# modules read there) and holding one JAX persistent compilation cache, used by the workers and every process
# the tests start (launcher runs, resumed runs, multi-host processes): the same smoke-size programs are compiled
# once per session instead of once per process. The controller makes the folder (the workers inherit the
# variables) and removes it at exit; a JAX_COMPILATION_CACHE_DIR set by the user is used as given and kept.
if "AGENTIC_RL_TEST_SESSION_DIR" not in os.environ:
  import atexit
  import shutil
  import tempfile
  _session = tempfile.mkdtemp(prefix="agentic_rl_test_session_")
  atexit.register(shutil.rmtree, _session, ignore_errors=True)
  os.environ["AGENTIC_RL_TEST_SESSION_DIR"] = _session
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  os.environ["JAX_COMPILATION_CACHE_DIR"] = os.path.join(os.environ["AGENTIC_RL_TEST_SESSION_DIR"], "jax_cache")
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

# absltest helpers (create_tempdir, ...) read absl flags; pytest never parses them.
from absl import flags as _absl_flags  # noqa: E402

if not _absl_flags.FLAGS.is_parsed():
  _absl_flags.FLAGS.mark_as_parsed()


import re  # noqa: E402

import pytest  # noqa: E402

# Checks that repeat, at CI's expense, what another CI test already covers; they run with `-m slow`:
#   - the sharded-equals-single-device updates on two of their four (mesh, LoRA) cases: CI keeps data8 x full
#     fine-tuning and the (2, 2, 2) cube x LoRA, which together cover both meshes and both parameter sets;
#   - bf16 parameters with f32 master weights under LoRA (CI keeps the full fine-tuning case);
#   - blocked attention and blocked logits one at a time (CI keeps both blocked at once, `_both`);
#   - the trainer kit's micro-batch test (policy_update's shares are checked in CI by the ProgAgent and PlanPO
#     accumulation tests of lm_training_test);
#   - PhGPO SIGKILLed mid warm-up (CI keeps ProgAgent's SIGKILL-and-resume and PhGPO's stop-and-resume);
#   - the SFT forms of PlanPO's and ProgAgent's micro-batch accumulation on the mesh (CI keeps the RL / GSPO
#     forms: the same common.lm.updates accumulation under the harder loss);
#   - ProgAgent's stop-and-resume from a mid-GSPO checkpoint (the kit's open_stage, which CI covers through
#     PlanPO's resume test and the kit's run_sft resume test; CI keeps ProgAgent's SIGKILL-and-resume).
SLOW_CASES = re.compile(
    r"^tests/lm_training_test\.py::\w+::test_\w+_sharded_equals_single_device_(data8_lora|cube_full)$"
    r"|^tests/lm_training_test\.py::(PlanPO|ProgAgent)ShardedTest::test_accumulation_equals_one_pass0$"
    r"|^tests/progagent_train_test\.py::SmokeRunTest::test_resume_gives_identical_state$"
    r"|^tests/lm_training_test\.py::ProgAgentShardedTest::test_bf16_params_with_f32_master_weights1$"
    r"|^tests/lm_attention_test\.py::ModelParityTest::test_logprobs_and_grads_equal_dense_(attention|logit)_blocks$"
    r"|^tests/trainer_kit_test\.py::TrainerKitTest::test_micro_batches_give_the_one_pass_update$"
    r"|^tests/resume_kill_test\.py::PhGPOKillResumeTest::test_sigkill_mid_warmup$")


# The scopes (a class, or a module of test functions) that take longest, started first: with --dist loadscope
# the workers take scopes in collection order, so a long scope collected last leaves the other worker idle
# at the end (longest-first keeps the two workers' finishing times close). phgpo_notebook_test is left out:
# it reads the smoke run PhGPOTrainTest makes (tests/shared_runs.py), so started early it would only wait.
LONGEST_FIRST = ("tests/progagent_train_test.py::SmokeRunTest", "tests/phgpo_train_test.py::PhGPOTrainTest",
                 "tests/planpo_train_test.py::SmokeTest", "tests/phgpo_train_test.py::LMPolicyTrainTest", "tests/lm_training_test.py::",
                 "tests/multihost_test.py::", "tests/security_contained_test.py::TwentyEpisodesTest",
                 "tests/trainer_kit_test.py::", "tests/planpo_train_test.py::MicroBatchTest")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):   # pylint: disable=unused-argument
  for item in items:
    if SLOW_CASES.search(item.nodeid):
      item.add_marker(pytest.mark.slow)
  rank = lambda item: next((i for i, p in enumerate(LONGEST_FIRST) if item.nodeid.startswith(p)),
                           len(LONGEST_FIRST))
  items.sort(key=rank)   # stable: the order inside a scope, and of the other scopes, is kept


"""ProgAgent's GSPO rollouts through the common multi-turn driver (common.rollout.RolloutDriver).

  pool = make_pool(config, num_workers, cache_dir=...)        # WorkerPool.local of progagent.ptc_env.ProgEnv
  trajs = run_rollouts(pool, LMSampler(params, model, key=key, ...), chat, task_ids, config=config, seed=s)
  pool.close()

The environments are ProgEnv workers of the configured harness (`mode`: 'ptc' by default, 'dtc', 'hybrid')
and program runtime (`runtime`: 'sandboxed' = the sandboxed IPython kernel of progagent.runtime, 'inprocess'
= trusted smoke runs only), held in-process by common.env_pool.WorkerPool.local. The driver renders the
prompt and every observation with the policy's common.chat.ChatTemplate (native tool-call format), batches the
policy across episodes, and records token-in/token-out trajectories (common.trajectory). The policy is
LMSampler (common.lm.sampler): each episode's KV cache kept across turns, only new tokens prefilled
(`gspo.kv_reuse`; False: common.lm.sampling.generate over the episodes' whole left-padded contexts), in a pool
of cache rows within `gspo.kv_cache_max_gb` GiB: episodes beyond it are re-prefilled each turn until a row
frees (first come, first kept). The tokens sampled do not depend on the budget or on reuse.

Every episode ends as 'done' (an answer was submitted, or a reply had no tool call), 'turn_limit'
(`env.max_turns` replies), 'length_limit' (`env.max_context_tokens`) or 'env_error' (the program runtime or
the environment failed); a reply cut by `env.max_response_tokens` is kept (its tokens are the policy's) and the
episode goes on. Reward = the verifier R in {0, 1} (ProgEnv's info['reward']); 0 after an env_error.
"""

from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

from common import chat as chat_lib
from common import env_pool
from common import policy_io
from common import rollout as rollout_lib
from common import trajectory as traj_lib
from common.lm import sampler as sampler_lib
from progagent import harness
from progagent import ptc_env

# Seconds one environment step may take: a program (ProgEnv's own limit, 120 s) plus a kernel start under load.
STEP_TIMEOUT_S = 600.0


def make_pool(config, num_workers: int, *, cache_dir: str | None = None) -> env_pool.WorkerPool:
  """A WorkerPool.local of `num_workers` ProgEnv environments (each on its own thread) of the config's harness
  (`mode`) and runtime (`runtime`: 'sandboxed' -> ProgEnv runtime 'kernel'); the level comes with each task id
  ('domain/name@vK', progagent.train.draw_levels), else the first of `env.scales`; cache_dir: the
  environments' generated-state cache; `env.normalize_errors`: error records become failed calls; `env.max_state_bytes`:
  what one episode's tool calls may store on the host (progagent.task_env). Config key `env.backend` 'ray': each
  ProgEnv is built by a Ray actor on a node of the cluster at `env.ray_address` (its kernels sandboxed there),
  without cache_dir (a folder of this host; each environment generates its state at reset, byte-identical to a
  cached copy) so that nothing is left on the nodes. With config `env.mcp.servers` set, each worker is a ProgEnv over
  its own progagent.mcp_task_env.McpTaskEnv (config `env.mcp.*`: the tasks of `env.mcp.tasks_file` over those
  servers, each worker's servers sandboxed and started once; the reward is the evaluator's verdict)."""
  backend = env_pool.backend_options(config.env)
  if backend:
    cache_dir = None
  mcp = config.env.get("mcp", None)
  if mcp is not None and tuple(mcp.get("servers", ())):
    factory = functools.partial(_mcp_prog_env, mcp.to_dict(), mode=config.mode,
                                runtime="kernel" if config.runtime == "sandboxed" else "inprocess")
    return env_pool.WorkerPool.local(factory, num_workers, step_timeout_s=STEP_TIMEOUT_S, **backend)
  factory = functools.partial(ptc_env.ProgEnv, mode=config.mode,
                              runtime="kernel" if config.runtime == "sandboxed" else "inprocess",
                              scale=int(config.env.scales[0]), cache_dir=cache_dir,
                              normalize_errors=bool(config.env.get("normalize_errors", False)),
                              max_state_bytes=int(config.env.get("max_state_bytes", 32 * 1024 ** 2)))
  return env_pool.WorkerPool.local(factory, num_workers, step_timeout_s=STEP_TIMEOUT_S, **backend)


def _mcp_prog_env(mcp: dict, *, mode: str, runtime: str) -> ptc_env.ProgEnv:
  """One worker of an `env.mcp` pool: ProgEnv(McpTaskEnv from the config node, mode, runtime), closing both."""
  import ml_collections
  from progagent import mcp_task_env
  env = mcp_task_env.from_config(ml_collections.ConfigDict(mcp))
  return ptc_env.ProgEnv(env, mode=mode, runtime=runtime, close_env=True)


def sampler_options(config, model=None, rows: int = 0) -> dict:
  """LMSampler keyword arguments from the config (common.lm.sampler.reuse_options): kv_reuse = `gspo.kv_reuse`
  (default True: each episode's KV cache is kept across turns and only new tokens are prefilled), cache rows
  capped at `env.max_context_tokens` slots, and the cache pool's budget cache_max_bytes = `gspo.kv_cache_max_gb`
  GiB (0 = no limit). The published setting (512 rollouts x 32k tokens of an 8B model) would need terabytes for
  every row: the pool holds the rows that fit (floor(budget / one row of `env.max_context_tokens` slots)), first
  come, first kept, and the other episodes are re-prefilled each turn until a row frees; reuse is turned off
  (with a warning) only when not even one row fits. sample_keys = `gspo.sample_keys` ('request', the default:
  the sampled tokens do not depend on the budget, on reuse or on `gspo.generate_batch_size`; 'call': the stream
  before the pool, for the tables made with it; common.lm.sampler).
  Without `model`: {'kv_reuse', 'cache_len', 'sample_keys'} (no budget)."""
  g = config.gspo
  keys = {"sample_keys": sampler_lib.check_sample_keys(g.get("sample_keys", "request"), "gspo.sample_keys")}
  if model is None:
    return {"kv_reuse": bool(g.get("kv_reuse", True)), "cache_len": int(config.env.max_context_tokens), **keys}
  return {**sampler_lib.reuse_options(model, enabled=g.get("kv_reuse", True), rows=rows,
                                      context_tokens=int(config.env.max_context_tokens),
                                      max_gib=float(g.get("kv_cache_max_gb", 32.0)), key="gspo"), **keys}


def driver_config(config, *, seed: int) -> rollout_lib.RolloutConfig:
  """The driver settings: G = `gspo.rollouts_per_task`, limits `env.max_turns`, `env.max_context_tokens`,
  `env.max_response_tokens`, `env.max_observation_chars`; every episode resets with `seed` (the G rollouts of
  a task share its instance); a reply without a tool call ends the episode; a cut reply continues."""
  e = config.env
  return rollout_lib.RolloutConfig(group_size=config.gspo.rollouts_per_task, max_turns=e.max_turns,
                                   max_context_tokens=e.max_context_tokens, max_response_tokens=e.max_response_tokens,
                                   max_observation_chars=e.max_observation_chars, seed=seed, seed_mode="fixed",
                                   stop_on_no_call=True, on_truncated_response="continue",
                                   step_timeout_s=STEP_TIMEOUT_S)


def run_rollouts(pool: env_pool.WorkerPool, sampler: policy_io.Policy, chat: chat_lib.ChatTemplate,
                 task_ids: Sequence[str], *, config, seed: int,
                 demonstration: Sequence[dict] = ()) -> list[traj_lib.Trajectory]:
  """G = gspo.rollouts_per_task rollouts of every task through the common driver (module docstring).

  The system message is the harness's (progagent.harness.system_prompt of `mode`), as in the SFT data;
  `demonstration` (few-shot messages, progagent.evaluation.demonstration) follows it in every first prompt.
  Reward: the verifier R that ProgEnv reports when the episode is done; an episode that ended otherwise
  (no tool call, turn or context limit) is verified on its final state (ProgEnv.verify: a task whose check is
  on the state can pass without an answer); 0 after an env_error.
  Returns:
    Trajectories ordered by (task, sample); group = the task's index in task_ids.
  """
  driver = None

  def reward(t: traj_lib.Trajectory) -> float:
    if "reward" in t.final_info:
      return float(t.final_info["reward"])
    worker = driver.worker_for(t.episode)
    return float(worker.query("verify")) if worker is not None and t.initial_observation else 0.0

  driver = rollout_lib.RolloutDriver(pool, sampler, chat, config=driver_config(config, seed=seed),
                                     reward_fn=reward, system_prompt=harness.system_prompt(config.mode),
                                     demonstration=demonstration)
  return driver.run(list(task_ids))


def episode_stats(t: traj_lib.Trajectory) -> dict:
  """One rollout's accounting, in tokens of the policy's tokenizer (the fields of progagent.harness's
  EpisodeStats, counted on the trajectory).

  turns; tool_calls / tool_errors (task-tool calls, those made inside programs included: ProgEnv's info);
  parse_errors (unreadable replies, and calls ProgEnv refused as malformed: status 'invalid');
  program_errors (programs that raised: info['program_error']); errors (their sum); context_tokens (the
  whole trajectory); action_tokens (the policy's tokens); observation_tokens (prompt tokens after the first
  prompt); cut_responses (replies cut by env.max_response_tokens: Turn.truncated).
  """
  st = {"turns": t.num_turns,
        "tool_calls": max([int(tn.info.get("tool_calls", 0)) for tn in t.turns] + [0]),
        "tool_errors": max([int(tn.info.get("tool_errors", 0)) for tn in t.turns] + [0]),
        "parse_errors": sum(tn.status in ("parse_error", "invalid") for tn in t.turns),
        "program_errors": sum(bool(tn.info.get("program_error")) for tn in t.turns),
        "context_tokens": int(sum(len(tn.prompt_ids) + len(tn.response_ids) for tn in t.turns)),
        "action_tokens": int(sum(len(tn.response_ids) for tn in t.turns)),
        "observation_tokens": int(sum(len(tn.prompt_ids) for tn in t.turns[1:])),
        "cut_responses": sum(bool(tn.truncated) for tn in t.turns)}
  st["errors"] = st["tool_errors"] + st["parse_errors"] + st["program_errors"]
  return st


def rollout_metrics(trajs: Sequence[traj_lib.Trajectory]) -> dict:
  """gspo/reward (mean), rollout/<stat> means over rollouts (episode_stats), rollout/term_<termination>
  fractions (common.trajectory.TERMINATIONS)."""
  stats = [episode_stats(t) for t in trajs]
  row = {"gspo/reward": float(np.mean([t.reward for t in trajs]))}
  for f in ("turns", "tool_calls", "tool_errors", "parse_errors", "program_errors", "errors", "context_tokens",
            "action_tokens", "observation_tokens", "cut_responses"):
    row[f"rollout/{f}"] = float(np.mean([s[f] for s in stats]))
  for term in traj_lib.TERMINATIONS:
    row[f"rollout/term_{term}"] = float(np.mean([t.termination == term for t in trajs]))
  return row


def rollout_rows(step: int, trajs: Sequence[traj_lib.Trajectory]) -> list[dict]:
  """gspo/rollouts.jsonl rows: each rollout's texts (observations cut to 2,000 characters) and accounting."""
  return [{"step": step, "task_id": t.task_id, "group": t.group, "sample": t.sample, "seed": t.seed,
           "reward": t.reward, "termination": t.termination, "error": t.error,
           "stats": episode_stats(t),
           "turns": [{"response": tn.response_text, "observation": tn.observation[:2000], "status": tn.status}
                     for tn in t.turns]} for t in trajs]

"""The multi-turn rollout driver: a pool of W sandboxed environment workers, G rollouts per task.

  pool = WorkerPool(EnvSpec('common.envs.scienceworld_env:ScienceWorldToolEnv'), num_workers=4)
  driver = RolloutDriver(pool, policy, tokenizer, config=RolloutConfig(group_size=5, max_turns=30))
  trajectories = driver.run(['boil/0', 'melt/3'])      # 2 tasks x G=5 rollouts, in task order
  pool.close()                                          # no process left behind

Loop (lock-step, so that the policy sees one batch per tick):
  1. queued episodes go to idle workers, which reset to the episode's task (env.reset(task, seed));
  2. every episode waiting for an action contributes one PolicyRequest (its whole token context);
     the policy answers the batch at once;
  3. each response is decoded and parsed (common.tool_calls): a call goes to that episode's worker
     as env.step; an unreadable call becomes an error observation (no env step); a reply with no
     call at all ends the episode (RolloutConfig.stop_on_no_call);
  4. the driver waits for all steps and resets issued in this tick, each bounded by the per-step
     timeout, and appends the observation to the episode's context (as tokens).
An environment process that crashes, hangs (no answer within `step_timeout_s`) or raises ends that
episode with termination 'env_error' and the reason in `Trajectory.error`; a dead or hung worker is
killed and replaced (in the background) and the run carries on. `WorkerPool.close` kills every
worker's process tree and removes its cgroup and workspace.

Policy interface: `policy(requests: list[PolicyRequest]) -> list[PolicyOutput]`. A language-model
sampler implements it by generating up to `max_new_tokens` after `token_ids`; `ScriptedPolicy`
implements it from a function of the request (tests, gold replays).
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import json
import logging
import time
from typing import Any, Callable, NamedTuple, Sequence

from common import trajectory as traj_lib
from common.env_client import EnvClient, EnvError, EnvSpec, InProcessEnv, LoopThread
from common.sandbox import SandboxConfig
from common.tool_calls import parse_tool_call

_log = logging.getLogger(__name__)

# Failures after which the worker process is replaced ('env_exception' leaves a live process).
_REPLACE_ON = ("crash", "timeout", "start", "protocol")


class PolicyRequest(NamedTuple):
  """One episode asking for its next response.

  Attributes:
    episode: rollout index in this run; task_id, sample (g in [0, G)), turn: where it is.
    token_ids: the whole context so far (list[int]); the policy generates a continuation.
    max_new_tokens: most tokens the response may have (turn cap and context room).
  """
  episode: int
  task_id: str
  sample: int
  turn: int
  token_ids: list[int]
  max_new_tokens: int


class PolicyOutput(NamedTuple):
  """The policy's response: token ids (end-of-turn token included if it made one), log-probs."""
  token_ids: list[int]
  logprobs: list[float] | None = None


Policy = Callable[[list[PolicyRequest]], list[PolicyOutput]]


@dataclasses.dataclass(frozen=True)
class ChatFormat:
  """How prompt text fragments are rendered (ChatML by default, as Qwen models use).

  `initial` renders the system message with the tool list and the task's first observation and
  opens the assistant turn; `observation` renders a tool answer and opens the next assistant turn.
  Each fragment is encoded on its own and appended. The assistant turn is closed by the policy's
  own end-of-turn token (the tokenizer's `eos_id`, e.g. <|im_end|> for Qwen); where a response was
  cut before it, the driver inserts `eos_id` at the start of the next prompt fragment (a prompt
  token, not a policy token).
  """
  system: str = ("You are an agent that solves the task by calling tools. Each reply contains exactly "
                 "one tool call as a JSON object {\"name\": <tool>, \"arguments\": {...}}.")
  initial_template: str = ("<|im_start|>system\n{system}\n\n# Tools\n{tools}<|im_end|>\n"
                           "<|im_start|>user\n{observation}<|im_end|>\n<|im_start|>assistant\n")
  observation_template: str = ("\n<|im_start|>user\n<tool_response>\n{observation}\n"
                               "</tool_response><|im_end|>\n<|im_start|>assistant\n")

  def initial(self, tools: Sequence[dict], observation: str) -> str:
    lines = "\n".join(json.dumps({"name": t["name"], "description": t.get("description", ""),
                                  "parameters": t.get("inputSchema", {})}) for t in tools)
    return self.initial_template.format(system=self.system, tools=lines, observation=observation)

  def observation(self, text: str) -> str:
    return self.observation_template.format(observation=text)


class RolloutConfig(NamedTuple):
  """Driver settings.

  Attributes:
    group_size: G, rollouts per task (GRPO group).
    max_turns: responses per episode before 'turn_limit'.
    max_context_tokens: context length at which an episode ends with 'length_limit'.
    max_response_tokens: cap on one response (PolicyRequest.max_new_tokens).
    step_timeout_s: seconds an env step may take before the worker counts as hung.
    reset_timeout_s: seconds for env.reset (None: step_timeout_s).
    stop_on_no_call: a reply with no JSON object ends the episode ('done'); else it gets an error
      observation and the episode goes on.
    max_observation_chars: observations are cut to this many characters before rendering.
    seed: base seed; episode e resets with seed + e.
    max_consecutive_start_failures: worker starts that may fail in a row before run() gives up.
  """
  group_size: int = 5
  max_turns: int = 10
  max_context_tokens: int = 8192
  max_response_tokens: int = 512
  step_timeout_s: float = 60.0
  reset_timeout_s: float | None = None
  stop_on_no_call: bool = True
  max_observation_chars: int = 8000
  seed: int = 0
  max_consecutive_start_failures: int = 3


class ScriptedPolicy:
  """A policy from a function of the request: script(request) -> response text.

  The text is encoded with `tokenizer` and, if the tokenizer has an `eos_id`, the end-of-turn id is
  appended. Log-probs are None.
  """

  def __init__(self, script: Callable[[PolicyRequest], str], tokenizer: traj_lib.Tokenizer):
    self.script = script
    self.tokenizer = tokenizer

  def __call__(self, requests: list[PolicyRequest]) -> list[PolicyOutput]:
    out = []
    for r in requests:
      ids = self.tokenizer.encode(self.script(r))
      eos = getattr(self.tokenizer, "eos_id", None)
      if eos is not None:
        ids = ids + [eos]
      out.append(PolicyOutput(ids[: r.max_new_tokens]))
    return out


# --------------------------------------------------------------------------------------------
# worker pool


class WorkerPool:
  """W environment workers, each a sandboxed process (or in-process for benchmarks).

  Args:
    spec: EnvSpec of the environment.
    num_workers: W.
    sandbox: SandboxConfig for every worker.
    in_process: build the environment in this process instead (no isolation; benchmarks only).
    step_timeout_s: default per-call timeout of each worker.
  Workers start in parallel; the constructor waits for all of them and raises EnvError('start')
  if any cannot start (the others are closed first).
  """

  def __init__(self, spec: EnvSpec, num_workers: int, *, sandbox: SandboxConfig = SandboxConfig(),
               in_process: bool = False, step_timeout_s: float = 60.0):
    if num_workers < 1:
      raise ValueError(f"num_workers must be >= 1, got {num_workers}")
    self.spec = spec
    self.sandbox = sandbox
    self.in_process = in_process
    self.step_timeout_s = step_timeout_s
    self.loop = None if in_process else LoopThread("env-pool-loop")
    self._starter = concurrent.futures.ThreadPoolExecutor(max(2, num_workers), "env-start")
    self.workers: list[Any] = [None] * num_workers
    self._starting: dict[int, concurrent.futures.Future] = {}
    self.restarts = 0
    self.closed = False
    futs = [self._starter.submit(self._make) for _ in range(num_workers)]
    errors = []
    for i, f in enumerate(futs):
      try:
        self.workers[i] = f.result()
      except Exception as e:
        errors.append(e)
    if errors:
      self.close()
      raise errors[0]

  def __len__(self) -> int:
    return len(self.workers)

  def _make(self):
    if self.in_process:
      return InProcessEnv(self.spec)
    return EnvClient(self.spec, sandbox=self.sandbox, loop=self.loop,
                     step_timeout_s=self.step_timeout_s)

  def start_replacement(self, i: int) -> concurrent.futures.Future:
    """Kills worker i (if any) and starts a new one in the background; returns its future."""
    old = self.workers[i]
    self.workers[i] = None
    if old is not None:
      try:
        old.kill()
      except Exception:
        _log.exception("killing worker %d failed", i)
    self.restarts += 1
    fut = self._starter.submit(self._make)
    self._starting[i] = fut
    return fut

  def poll_replacement(self, i: int) -> str:
    """'ready' (installed), 'starting', or 'failed' (error in the future; slot stays empty)."""
    fut = self._starting.get(i)
    if fut is None:
      return "ready" if self.workers[i] is not None else "failed"
    if not fut.done():
      return "starting"
    del self._starting[i]
    if fut.exception() is not None:
      _log.warning("replacement of worker %d failed: %s", i, fut.exception())
      return "failed"
    self.workers[i] = fut.result()
    return "ready"

  def wait_any_replacement(self, timeout: float | None = None) -> None:
    if self._starting:
      concurrent.futures.wait(list(self._starting.values()), timeout=timeout,
                              return_when=concurrent.futures.FIRST_COMPLETED)

  def wait_until_whole(self, timeout_s: float = 120.0) -> bool:
    """Waits for pending replacements; returns is_whole()."""
    deadline = time.monotonic() + timeout_s
    while self._starting and time.monotonic() < deadline:
      self.wait_any_replacement(timeout=max(0.0, deadline - time.monotonic()))
      for i in list(self._starting):
        self.poll_replacement(i)
    return self.is_whole()

  def is_whole(self) -> bool:
    """All W workers exist and are alive."""
    return all(w is not None and w.alive for w in self.workers) and not self._starting

  def close(self) -> None:
    """Closes every worker (killing what does not exit) and waits for pending starts. Idempotent."""
    if self.closed:
      return
    self.closed = True
    for i, fut in list(self._starting.items()):
      try:
        w = fut.result(timeout=300)
        w.kill()
      except Exception:
        pass
    self._starting.clear()
    closers = [self._starter.submit(w.close) for w in self.workers if w is not None]
    concurrent.futures.wait(closers, timeout=60)
    for w in self.workers:
      if w is not None and getattr(w, "alive", False):
        w.kill()
    self.workers = [None] * len(self.workers)
    self._starter.shutdown(wait=True)
    if self.loop is not None:
      self.loop.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


# --------------------------------------------------------------------------------------------
# driver


def default_reward(t: traj_lib.Trajectory) -> float:
  """Outcome reward: the last step's info['reward'], else info['score'] / 100, else 0."""
  info = t.final_info
  if "reward" in info:
    return float(info["reward"])
  if "score" in info:
    return float(info["score"]) / 100.0
  return 0.0


@dataclasses.dataclass
class _Episode:
  traj: traj_lib.Trajectory
  context: list[int] = dataclasses.field(default_factory=list)
  pending_prompt: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Slot:
  episode: _Episode | None = None
  future: concurrent.futures.Future | None = None
  kind: str = ""          # 'reset' | 'step'
  deadline: float = 0.0
  started: float = 0.0


class RolloutDriver:
  """Runs G rollouts per task through a WorkerPool with a batched policy (see the module doc).

  Args:
    pool: the WorkerPool.
    policy: Policy callable.
    tokenizer: Tokenizer (encode/decode).
    config: RolloutConfig.
    chat_format: ChatFormat rendering the prompt fragments.
    reward_fn: Trajectory -> float (default `default_reward`); env_error episodes get 0.0.
  """

  def __init__(self, pool: WorkerPool, policy: Policy, tokenizer: traj_lib.Tokenizer, *,
               config: RolloutConfig = RolloutConfig(), chat_format: ChatFormat = ChatFormat(),
               reward_fn: Callable[[traj_lib.Trajectory], float] = default_reward):
    self.pool = pool
    self.policy = policy
    self.tok = tokenizer
    self.config = config
    self.fmt = chat_format
    self.reward_fn = reward_fn
    self._slots = [_Slot() for _ in range(len(pool))]
    self.stats: dict[str, Any] = {}

  def worker_for(self, episode: int):
    """The worker currently running `episode` (None if it is not running)."""
    for i, s in enumerate(self._slots):
      if s.episode is not None and s.episode.traj.episode == episode:
        return self.pool.workers[i]
    return None

  def run(self, task_ids: Sequence[str]) -> list[traj_lib.Trajectory]:
    """G rollouts of every task; returns the trajectories ordered by (task, sample).

    Raises:
      RuntimeError: workers kept failing to start (RolloutConfig.max_consecutive_start_failures).
    """
    cfg = self.config
    t_start = time.monotonic()
    episodes = []
    for gi, task in enumerate(task_ids):
      for g in range(cfg.group_size):
        e = len(episodes)
        episodes.append(_Episode(traj_lib.Trajectory(e, str(task), gi, g, cfg.seed + e)))
    queue = collections.deque(episodes)
    ready: list[tuple[int, _Episode]] = []   # (slot, episode) waiting for the policy
    self._start_failures = 0
    n_env_steps = 0
    env_time = 0.0
    policy_time = 0.0
    n_policy_calls = 0
    remaining = len(episodes)

    while remaining:
      # 0. replacements that finished
      for i in range(len(self._slots)):
        if self.pool.workers[i] is None:
          st = self.pool.poll_replacement(i)
          if st == "failed":
            self._start_failures += 1
            if self._start_failures > cfg.max_consecutive_start_failures:
              raise RuntimeError(f"environment workers failed to start {self._start_failures} times "
                                 "in a row; see the EnvError messages logged above")
            self.pool.start_replacement(i)
          elif st == "ready":
            self._start_failures = 0
      # 1. queued episodes -> idle live workers -> reset
      for i, slot in enumerate(self._slots):
        if not queue:
          break
        w = self.pool.workers[i]
        if slot.episode is None and w is not None:
          ep = queue.popleft()
          ep.traj.worker = i
          slot.episode = ep
          self._issue(i, "reset", w.submit_reset(ep.traj.task_id, ep.traj.seed,
                                                  timeout_s=cfg.reset_timeout_s or cfg.step_timeout_s))
      # 2. policy on every episode waiting for an action
      if ready:
        reqs = []
        for i, ep in ready:
          ctx = ep.context + ep.pending_prompt
          room = cfg.max_context_tokens - len(ctx)
          reqs.append(PolicyRequest(ep.traj.episode, ep.traj.task_id, ep.traj.sample,
                                    len(ep.traj.turns), ctx,
                                    max(0, min(cfg.max_response_tokens, room))))
        t0 = time.monotonic()
        outs = self.policy(reqs)
        policy_time += time.monotonic() - t0
        n_policy_calls += 1
        if len(outs) != len(reqs):
          raise ValueError(f"policy returned {len(outs)} outputs for {len(reqs)} requests")
        batch, ready = ready, []
        for (i, ep), req, out in zip(batch, reqs, outs):
          what = self._after_response(i, ep, req, out)
          if what == "ended":
            remaining -= 1
          elif what == "ready":  # unreadable call: error observation, no env step
            ready.append((i, ep))
      # 3. wait for this tick's resets and steps
      busy = [(i, s) for i, s in enumerate(self._slots) if s.future is not None]
      if not busy:
        if not ready and remaining:
          self.pool.wait_any_replacement(timeout=1.0)
        continue
      deadline = max(s.deadline for _, s in busy)
      concurrent.futures.wait([s.future for _, s in busy],
                              timeout=max(0.0, deadline - time.monotonic()))
      for i, slot in busy:
        ep, fut, kind = slot.episode, slot.future, slot.kind
        slot.future = None
        if not fut.done():
          fut.cancel()
          err = EnvError("timeout", f"no answer to {kind} within {cfg.step_timeout_s} s; worker killed")
        else:
          err = fut.exception()
        dt = time.monotonic() - slot.started
        if err is not None:
          if not isinstance(err, EnvError):
            err = EnvError("protocol", f"{type(err).__name__}: {err}")
          remaining -= self._fail(i, ep, err, kind, dt)
          continue
        res = fut.result()
        if kind == "reset":
          ep.traj.initial_observation = res
          ep.pending_prompt = self.tok.encode(self.fmt.initial(self.pool.workers[i].tools(),
                                                               self._clip(res)))
          ready.append((i, ep))
        else:
          n_env_steps += 1
          env_time += dt
          turn = ep.traj.turns[-1]
          turn.observation, turn.status = res.observation, res.status
          turn.done, turn.info, turn.env_seconds = res.done, res.info, dt
          if self._continue_or_end(i, ep, done=res.done, obs=res.observation):
            ready.append((i, ep))
          else:
            remaining -= 1
      # Episodes finished by a parse error/no-call this tick were handled in _after_response.

    wall = time.monotonic() - t_start
    trajs = [ep.traj for ep in episodes]
    counts = collections.Counter(t.termination for t in trajs)
    self.stats = {"episodes": len(trajs), "wall_s": wall, "episodes_per_s": len(trajs) / wall,
                  "env_steps": n_env_steps, "mean_step_s": env_time / max(1, n_env_steps),
                  "policy_calls": n_policy_calls, "policy_s": policy_time,
                  "restarts": self.pool.restarts,
                  "terminations": {k: counts.get(k, 0) for k in traj_lib.TERMINATIONS}}
    return trajs

  # --- helpers -------------------------------------------------------------------------------

  def _issue(self, i, kind, fut):
    s = self._slots[i]
    s.future, s.kind = fut, kind
    s.started = time.monotonic()
    timeout = self.config.step_timeout_s if kind == "step" else (
        self.config.reset_timeout_s or self.config.step_timeout_s)
    s.deadline = s.started + timeout + 10.0  # the worker enforces `timeout`; this is a backstop

  def _clip(self, text: str) -> str:
    n = self.config.max_observation_chars
    return text if len(text) <= n else text[:n] + f"\n[... cut {len(text) - n} characters]"

  def _after_response(self, i, ep, req, out) -> str:
    """Records the response; returns 'stepping' (step issued), 'ended' or 'ready' (ask again)."""
    cfg = self.config
    ids = [int(x) for x in out.token_ids][: max(req.max_new_tokens, 0)]
    turn = traj_lib.Turn(prompt_ids=ep.pending_prompt, response_ids=ids,
                         response_logprobs=None if out.logprobs is None else list(out.logprobs)[:len(ids)])
    ep.context.extend(ep.pending_prompt)
    ep.context.extend(ids)
    ep.pending_prompt = []
    ep.traj.turns.append(turn)
    turn.response_text = self.tok.decode(ids)
    if len(ep.context) >= cfg.max_context_tokens:
      turn.status = "length_limit"
      self._end(i, ep, "length_limit")
      return "ended"
    parsed = parse_tool_call(turn.response_text)
    if parsed.kind == "call":
      turn.call = parsed.call
      self._issue(i, "step", self.pool.workers[i].submit_step(parsed.call,
                                                              timeout_s=cfg.step_timeout_s))
      return "stepping"
    if parsed.kind == "none" and cfg.stop_on_no_call:
      turn.status = "no_call"
      self._end(i, ep, "done")
      return "ended"
    turn.parse_error = parsed.error or "no tool call"
    turn.status = "parse_error"
    turn.observation = parsed.error_observation()
    if self._continue_or_end(i, ep, done=False, obs=turn.observation):
      return "ready"
    return "ended"

  def _continue_or_end(self, i, ep, *, done: bool, obs: str) -> bool:
    """After an observation: end the episode (returns False) or queue its next prompt (True)."""
    cfg = self.config
    if done:
      self._end(i, ep, "done")
      return False
    if len(ep.traj.turns) >= cfg.max_turns:
      self._end(i, ep, "turn_limit")
      return False
    prompt = self.tok.encode(self.fmt.observation(self._clip(obs)))
    eos = getattr(self.tok, "eos_id", None)
    last = ep.traj.turns[-1].response_ids if ep.traj.turns else []
    if eos is not None and (not last or last[-1] != eos):
      prompt = [int(eos)] + prompt
    if len(ep.context) + len(prompt) >= cfg.max_context_tokens:
      self._end(i, ep, "length_limit")
      return False
    ep.pending_prompt = prompt
    return True

  def _end(self, i, ep, termination: str, error: str | None = None) -> int:
    ep.traj.termination = termination
    ep.traj.error = error
    ep.traj.reward = 0.0 if termination == "env_error" else float(self.reward_fn(ep.traj))
    self._slots[i].episode = None
    self._slots[i].future = None
    return 1

  def _fail(self, i, ep, err: EnvError, kind: str, dt: float) -> int:
    _log.warning("episode %d (task %s, worker %d): %s during %s", ep.traj.episode, ep.traj.task_id,
                 i, err, kind)
    if kind == "step" and ep.traj.turns:
      t = ep.traj.turns[-1]
      t.status, t.observation, t.env_seconds = "env_error", str(err), dt
    self._end(i, ep, "env_error", error=f"{err.reason}: {err.detail}")
    w = self.pool.workers[i]
    if err.reason in _REPLACE_ON or w is None or not w.alive:
      self.pool.start_replacement(i)
    return 1

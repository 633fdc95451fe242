"""The windowed agent format of common.rollout (RolloutConfig.mode == 'window'): one prompt per turn.

The rollout driver has two modes (config key rollout.mode):
  'chat'    token-in/token-out: one growing context per episode, prompt_0 + response_0 + prompt_1 + ...;
            earlier turns are never re-tokenised; tool calls in the model's native format
            (common.chat). A trajectory is one training row.
  'window'  this module: the prompt is RE-RENDERED every turn, as verl-agent (GiGPO; Feng et al. 2025,
            "Group-in-Group Policy Optimization for LLM Agent Training", arXiv:2505.10978) and PlanPO do:
              instruction + the last k (observation, action) pairs + the current observation
              + the admissible actions + the format instruction,
            one user message rendered by the tokenizer's chat template (common.chat.ChatTemplate.prompt_ids,
            with a system message). The reply is '<think>...</think><action>...</action>'
            (common.tool_calls.parse_action); the action text is the call
            {'name': 'action', 'arguments': {'action': text}}. Each turn is its own training row:
            `WindowTurn.prompt_ids` is that turn's whole prompt and `turn_rows` / `collate_rows` lay the
            rows out for the trainer. `WindowTrajectory.token_ids()` (one context) therefore raises.

Invalid actions: a reply whose <action> cannot be read (the named error of parse_action: no env step;
the next prompt repeats the same observation after a note naming the error), an action the environment
answers with status 'invalid', or one missing from the admissible list shown in the prompt (a listed template
'name[<...>]', WebShop's 'search[<your query>]', admits any 'name[ARG]' with ARG not blank:
common.envs.base.admits). Each is
recorded per turn (`WindowTurn.invalid`) and shaped by `WindowConfig.invalid_action_penalty`
(verl-agent's invalid_action_penalty_coef, published 0.1): step_reward = env_reward - penalty.
Turn limits are RolloutConfig.max_turns; the published ones are in PUBLISHED_TURN_LIMITS.

What the window needs from an environment (all optional): a query method `episode_info()` ->
{'instruction', 'observation', 'admissible_actions'} read after every reset (without it the reset
text is both instruction and first observation, and no list is shown), step info
'admissible_actions' (list[str]), 'step_reward' (float, the env's reward of this step; 0 if absent)
and 'won' (bool; without it success = outcome reward >= 1). common/envs/twx_env.py and
common/envs/scienceworld_env.py give all of them.

Anchor observations (GiGPO step groups): `anchor_id(text)` is a stable 63-bit hash (BLAKE2b) of the raw
observation a turn acted on, so equal observations (across rollouts and turns) get equal ids;
`collate_rows` turns (task group, anchor) pairs into dense step-group ids.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from common import tool_calls as tc
from common import trajectory as traj_lib
from common.envs import base as envs_base

# Published turn limits (PlanPO; GiGPO/verl-agent's ALFWorld max_steps = 50).
PUBLISHED_TURN_LIMITS = {"household": 50, "alfworld": 50, "scienceworld": 20}

WINDOW_SYSTEM = "You are a helpful assistant."   # the fallback format's system message (it needs one)
FORMAT = ("Now it's your turn to take an action.\n"
           "You should first reason step-by-step about the current situation. This reasoning process MUST "
           "be enclosed within <think> </think> tags.\n"
           "Once you've finished your reasoning, you should choose an admissible action for current step "
           "and present it within <action> </action> tags.")
INVALID_HISTORY_ACTION = "(invalid response)"


class WindowConfig(NamedTuple):
  """Settings of the windowed mode (config keys rollout.window.*).

  Attributes:
    history_length: k, the (observation, action) pairs of earlier turns shown (0: none).
    invalid_action_penalty: subtracted from a turn's step reward when its action is invalid (>= 0;
      verl-agent's published coefficient 0.1; 0 turns the shaping off, the flag is still recorded).
    require_think: a reply without a <think> block is invalid (parse_action's 'no_think').
    max_admissible_actions: at most this many admissible actions are listed (0: the list is left
      out); a longer list is cut and a note gives the number left out (ScienceWorld has thousands).
    header: the first line of every prompt (names the environment).
    format_text: the closing instruction of every prompt (default FORMAT, verl-agent's ALFWorld wording; a
      shorter text keeps prompts short for small CPU models, e.g. configs/planpo_twx.py).
    summary: show a one-line memory before the observation instead of (or beside) the history window:
      "Your previous action: 'A'. Places visited so far: x, y." (the places from the env's 'location' in
      episode_info and step info, in first-visit order; without it only the previous action). A few
      dozen tokens where a history window of k observations costs k of them (configs/planpo_twx.py:explore).
  """
  history_length: int = 2
  invalid_action_penalty: float = 0.1
  require_think: bool = True
  max_admissible_actions: int = 200
  header: str = "You are an expert agent operating in a text-based environment."
  format_text: str = FORMAT
  summary: bool = False


def anchor_id(observation: str) -> int:
  """Stable id of an observation text: the first 8 bytes of BLAKE2b(utf-8), as an int in [0, 2^63)."""
  h = hashlib.blake2b(observation.encode("utf-8"), digest_size=8).digest()
  return int.from_bytes(h, "big") >> 1


@dataclasses.dataclass
class WindowTurn(traj_lib.Turn):
  """A common.trajectory.Turn of the windowed mode: one training row.

  Attributes (beyond Turn's; prompt_ids is this turn's whole prompt):
    index: turn index t (0-based).
    policy_tokens: number of the policy's own tokens in this turn (len(response_ids)).
    anchor_id: `anchor_id` of `window_observation`, the raw observation this turn acted on.
    window_observation: that observation.
    admissible_actions: the list shown in the prompt (None: the env gave none).
    action: the action text read from the reply (None for an unreadable reply).
    invalid: the action was invalid (unreadable reply, env status 'invalid', or not admissible).
    penalty: WindowConfig.invalid_action_penalty if invalid else 0.
    env_reward: the env's step reward (info['step_reward']; 0 without a step).
    step_reward: env_reward - penalty.
    success: the episode succeeded (set on every turn when the episode ends).
  Turn.info of an unreadable reply's turn is a copy of the last env step's info (the state did not
  change), so that reward functions reading the final info see the game's score.
  """
  index: int = 0
  policy_tokens: int = 0
  anchor_id: int = 0
  window_observation: str = ""
  admissible_actions: list[str] | None = None
  action: str | None = None
  invalid: bool = False
  penalty: float = 0.0
  env_reward: float = 0.0
  step_reward: float = 0.0
  success: bool = False


@dataclasses.dataclass
class WindowTrajectory(traj_lib.Trajectory):
  """A Trajectory of WindowTurns; each turn is its own row (`rows()`), never one context.

  Attributes: success (the episode succeeded: last env info 'won', else reward >= 1).
  """
  success: bool = False

  def _no_context(self, *a, **k):
    raise TypeError("a windowed trajectory has one prompt per turn, not one context; use "
                    "WindowTrajectory.rows() / common.windowed.collate_rows")

  token_ids = policy_mask = turn_ids = turn_spans = truncated_mask = logprobs = _no_context

  def rows(self) -> list[dict[str, Any]]:
    """One dict per turn: prompt_ids, response_ids, logprobs (list or None), episode, group, sample,
    task_id, turn, policy_tokens, anchor_id, invalid, penalty, env_reward, step_reward, done, success,
    truncated, episode_reward, num_turns, termination."""
    out = []
    for t in self.turns:
      out.append({"prompt_ids": list(t.prompt_ids), "response_ids": list(t.response_ids),
                  "logprobs": t.response_logprobs, "episode": self.episode, "group": self.group,
                  "sample": self.sample, "task_id": self.task_id, "turn": t.index,
                  "policy_tokens": t.policy_tokens, "anchor_id": t.anchor_id, "invalid": t.invalid,
                  "penalty": t.penalty, "env_reward": t.env_reward, "step_reward": t.step_reward,
                  "done": t.done, "success": self.success, "truncated": t.truncated,
                  "episode_reward": self.reward, "num_turns": self.num_turns,
                  "termination": self.termination})
    return out


@dataclasses.dataclass
class WindowState:
  """What the next prompt shows: instruction, history [(observation, action)], current observation."""
  instruction: str
  observation: str
  admissible: list[str] | None
  history: list[tuple[str, str]] = dataclasses.field(default_factory=list)
  note: str | None = None         # the named error of the previous reply, shown before the observation
  last_info: dict = dataclasses.field(default_factory=dict)   # the last env step's info
  visited: list[str] = dataclasses.field(default_factory=list)   # the env's 'location's, first-visit order

  def visit(self, place) -> None:
    """Records the env's 'location' (None or '' : unknown, ignored)."""
    if place and str(place) not in self.visited:
      self.visited.append(str(place))


def start(reset_text: str, episode_info: dict | None) -> WindowState:
  """The window of a new episode from the reset text and the env's episode_info() (None: not offered)."""
  if not episode_info:
    return WindowState(reset_text, reset_text, None)
  adm = episode_info.get("admissible_actions")
  state = WindowState(str(episode_info.get("instruction") or reset_text),
                      str(episode_info.get("observation", reset_text)),
                      None if adm is None else [str(a) for a in adm])
  state.visit(episode_info.get("location"))
  return state


def _actions_text(actions: Sequence[str], limit: int) -> str:
  shown = ", ".join(f"'{a}'" for a in actions[:limit])
  more = f" (and {len(actions) - limit} more not listed)" if len(actions) > limit else ""
  return f"Your admissible actions of the current situation are: [{shown}]{more}."


def render(state: WindowState, cfg: WindowConfig, clip: Callable[[str], str] = lambda s: s) -> str:
  """The user message of the next turn (verl-agent's ALFWorld template, environment-neutral)."""
  step = len(state.history)
  lines = []
  shown = state.history[len(state.history) - cfg.history_length:] if cfg.history_length > 0 else []
  task = clip(state.instruction)
  task = task if task.lower().startswith("your task is to") else f"Your task is to: {task}"
  if step == 0 or not shown:
    lines.append(cfg.header)
    if state.instruction != state.observation:
      lines.append(task)
    if step:
      lines.append(f"Prior to this step, you have already taken {step} step(s).")
  else:
    lines.append(f"{cfg.header} {task}")
    first = step - len(shown) + 1
    hist = "\n".join(f"[Observation {first + j}: '{clip(o)}', Action {first + j}: '{a}']"
                     for j, (o, a) in enumerate(shown))
    lines.append(f"Prior to this step, you have already taken {step} step(s). Below are the most recent "
                 f"{len(shown)} observations and the corresponding actions you took:\n{hist}")
  if cfg.summary:
    prev = state.history[-1][1] if state.history else "none"
    places = f" Places visited so far: {', '.join(state.visited)}." if state.visited else ""
    lines.append(f"Your previous action: '{prev}'.{places}")
  if state.note:
    lines.append(f"Your previous response was invalid: {state.note}")
  lines.append(f"You are now at step {step + 1} and your current observation is: {clip(state.observation)}")
  if state.admissible is not None and cfg.max_admissible_actions > 0:
    lines.append(_actions_text(state.admissible, cfg.max_admissible_actions))
  return "\n".join(lines) + "\n\n" + cfg.format_text


def prompt_ids(chat, state: WindowState, cfg: WindowConfig, *, system: str | None,
               clip: Callable[[str], str] = lambda s: s) -> list[int]:
  """The turn's prompt: [system, user: render(state)] through the chat template (no tools listed).

  system None: a native template gets no system message (it adds its own default, e.g. Qwen2.5's, as
  verl-agent's prompts do); the fallback format gets WINDOW_SYSTEM.
  """
  if system is None and getattr(chat, "native", False):
    msgs = []
  else:
    msgs = [{"role": "system", "content": WINDOW_SYSTEM if system is None else system}]
  msgs.append({"role": "user", "content": render(state, cfg, clip)})
  return chat.prompt_ids(msgs, None)


def parse(text: str, cfg: WindowConfig) -> tc.ParsedResponse:
  """A windowed-mode reply read as <think>..</think><action>..</action> (common.tool_calls.parse_action)."""
  return tc.parse_action(text, require_think=cfg.require_think)


def on_response(turn: WindowTurn, state: WindowState, parsed: tc.ParsedResponse, cfg: WindowConfig) -> None:
  """Fills the turn's window fields from the state it acted on; an unreadable reply is invalid and
  becomes a history entry and a note (the observation stays)."""
  turn.index = len(state.history)
  turn.policy_tokens = len(turn.response_ids)
  turn.window_observation = state.observation
  turn.anchor_id = anchor_id(state.observation)
  turn.admissible_actions = None if state.admissible is None else list(state.admissible)
  if parsed.kind == "call":
    turn.action = parsed.tool_calls[0]["arguments"]["action"]
    return
  _set_invalid(turn, True, cfg)
  state.history.append((state.observation, INVALID_HISTORY_ACTION))
  state.note = parsed.error


def on_step(turn: WindowTurn, state: WindowState, status: str, observation: str, info: dict,
            cfg: WindowConfig) -> None:
  """Records an env step's answer on the turn and moves the window on."""
  bad = status == "invalid" or (turn.admissible_actions is not None
                                and not envs_base.admits(turn.admissible_actions, turn.action))
  turn.env_reward = float(info.get("step_reward", 0.0) or 0.0)
  _set_invalid(turn, bad, cfg)
  state.history.append((state.observation, turn.action or ""))
  state.observation = observation
  adm = info.get("admissible_actions")
  state.admissible = None if adm is None else [str(a) for a in adm]
  state.note = None
  state.last_info = info
  state.visit(info.get("location"))


def _set_invalid(turn: WindowTurn, invalid: bool, cfg: WindowConfig) -> None:
  turn.invalid = bool(invalid)
  turn.penalty = float(cfg.invalid_action_penalty) if invalid else 0.0
  turn.step_reward = turn.env_reward - turn.penalty


def finish(traj: WindowTrajectory, state: WindowState | None) -> None:
  """Sets success on the trajectory and on every turn (after its reward is known)."""
  info = state.last_info if state is not None else {}
  traj.success = bool(info["won"]) if "won" in info else traj.reward >= 1.0
  for t in traj.turns:
    t.success = traj.success


def turn_rows(trajectories: Sequence[WindowTrajectory]) -> list[dict[str, Any]]:
  """All rows of all trajectories, in trajectory then turn order."""
  return [r for t in trajectories for r in t.rows()]


def collate_rows(rows: Sequence[dict], *, max_len: int | None = None, pad_id: int = 0) -> dict[str, np.ndarray]:
  """Pads per-turn rows into trainer arrays.

  Args:
    rows: R rows from `turn_rows`.
    max_len: L; default the longest prompt + response. Longer rows are cut at L (flag `truncated`).
    pad_id: padding token id.
  Returns:
    tokens i32[R, L] (prompt then response), policy_mask bool[R, L] (response tokens), logprobs
    f32[R, L] (0 where absent), lengths i32[R], prompt_lengths i32[R], policy_tokens i32[R] (the
    policy's tokens of the row, uncut), turn i32[R], episode_ids i32[R], group_ids i32[R],
    step_group_ids i32[R] (dense ids of equal (group, anchor_id): GiGPO step groups),
    anchor_ids i64[R] (NumPy only: JAX without x64 would narrow them), step_rewards f32[R],
    env_rewards f32[R], penalties f32[R], invalid bool[R], done bool[R], success bool[R],
    episode_rewards f32[R], num_turns i32[R], truncated bool[R], response_truncated bool[R].
  """
  r = len(rows)
  seqs = [list(x["prompt_ids"]) + list(x["response_ids"]) for x in rows]
  L = max_len if max_len is not None else max([len(s) for s in seqs] + [1])
  out = {"tokens": np.full((r, L), pad_id, np.int32), "policy_mask": np.zeros((r, L), bool),
         "logprobs": np.zeros((r, L), np.float32), "truncated": np.zeros(r, bool)}
  keys = {}
  sg = np.zeros(r, np.int32)
  for i, (x, s) in enumerate(zip(rows, seqs)):
    n, p = min(len(s), L), len(x["prompt_ids"])
    out["tokens"][i, :n] = s[:n]
    out["policy_mask"][i, p:n] = True
    lp = x.get("logprobs")
    if lp is not None and len(lp) == len(x["response_ids"]) and n > p:
      out["logprobs"][i, p:n] = np.asarray(lp, np.float32)[: n - p]
    out["truncated"][i] = len(s) > L
    sg[i] = keys.setdefault((x["group"], x["anchor_id"]), len(keys))
  col = lambda k, dt: np.asarray([x[k] for x in rows], dt).reshape(r)
  out.update(lengths=np.minimum([len(s) for s in seqs], L).astype(np.int32).reshape(r),
             prompt_lengths=np.asarray([len(x["prompt_ids"]) for x in rows], np.int32).reshape(r),
             policy_tokens=col("policy_tokens", np.int32), turn=col("turn", np.int32),
             episode_ids=col("episode", np.int32), group_ids=col("group", np.int32), step_group_ids=sg,
             anchor_ids=col("anchor_id", np.int64), step_rewards=col("step_reward", np.float32),
             env_rewards=col("env_reward", np.float32), penalties=col("penalty", np.float32),
             invalid=col("invalid", bool), done=col("done", bool), success=col("success", bool),
             episode_rewards=col("episode_reward", np.float32), num_turns=col("num_turns", np.int32),
             response_truncated=col("truncated", bool))
  return out

"""Multi-turn trajectories as token sequences: what the trainer needs from a rollout.

A trajectory's context is built by appending, never by re-rendering a chat template over the
history, so that the tokens the policy was conditioned on are exactly the tokens the trainer scores:

  context = prompt_0 + response_0 + prompt_1 + response_1 + ... + response_{T-1}

prompt_0 is the rendered system/tools/task text; prompt_t (t >= 1) is the rendered observation of
turn t-1 (tool results in the tool role, or an error note in the user role; common.chat.ChatTemplate
renders both) followed by the opening of the next assistant turn. Only response tokens are the
policy's own: `policy_mask` is True exactly there. The observation of the last turn is kept as text
(`Turn.observation`) but not appended, since no response follows it.

A response cut by its token budget (no end-of-turn token) has `Turn.truncated`; the driver then adds
the end-of-turn token at the start of the next prompt (a prompt token, not a policy token), and
`collate` reports it per trajectory and per token (`response_truncated`, `truncated_mask`).

Termination reasons (`Trajectory.termination`):
  'done'          the environment ended the episode, or the agent answered without a tool call
                  (RolloutConfig.stop_on_no_call);
  'turn_limit'    RolloutConfig.max_turns responses were produced;
  'length_limit'  the context reached RolloutConfig.max_context_tokens, or a response was cut by its
                  budget and RolloutConfig.on_truncated_response is 'end';
  'env_error'     the environment process crashed, hung, or raised (Trajectory.error says which).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, Sequence

import numpy as np

TERMINATIONS = ("done", "turn_limit", "length_limit", "env_error")


class Tokenizer(Protocol):
  """What the driver needs from a tokenizer: text <-> ids with no special tokens added."""

  def encode(self, text: str) -> list[int]: ...

  def decode(self, ids: Sequence[int]) -> str: ...


class ByteTokenizer:
  """UTF-8 bytes as token ids 0..255, plus `eos_id` = 256 (tests and scripted policies)."""

  eos_id = 256
  vocab_size = 257

  def encode(self, text: str) -> list[int]:
    return list(text.encode("utf-8"))

  def decode(self, ids: Sequence[int]) -> str:
    return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", "replace")


class HFTokenizer:
  """Adapts a Hugging Face tokenizer: encode without adding BOS/EOS (fragments are appended)."""

  def __init__(self, tok):
    self.tok = tok
    self.eos_id = tok.eos_token_id

  def encode(self, text: str) -> list[int]:
    return list(self.tok.encode(text, add_special_tokens=False))

  def decode(self, ids: Sequence[int]) -> str:
    return self.tok.decode(list(ids), skip_special_tokens=True)


@dataclasses.dataclass
class Turn:
  """One policy turn and the environment's answer to it.

  Attributes:
    prompt_ids: tokens appended to the context just before this turn's response.
    response_ids: the policy's tokens.
    response_logprobs: the sampler's log-probabilities of response_ids (None if not given).
    response_text: decoded response (end-of-turn token removed; reasoning kept).
    call: the first tool call run {'name', 'arguments'}, or None.
    parse_error: the error observation when the reply could not be read, or None.
    observation: the text answering this turn (tool outputs joined by a blank line, or the error
      note); '' if none.
    status: the environment's status of the last call, or 'parse_error' / 'no_call' / 'env_error' /
      'length_limit' / 'truncated' (a cut response ending the episode).
    done: the environment's done flag for this step.
    info: the environment's info dict for the last call.
    env_seconds: wall time of the environment steps.
    calls: every tool call run this turn, in order (several for Qwen parallel calls).
    reasoning: the reply's <think> text, or None.
    truncated: the response was cut by its token budget (no end-of-turn token).
    observation_ids: the tokens appended after this response (the next turn's prompt_ids); [] when the
      episode ended after this turn.
  """
  prompt_ids: list[int]
  response_ids: list[int]
  response_logprobs: list[float] | None = None
  response_text: str = ""
  call: dict | None = None
  parse_error: str | None = None
  observation: str = ""
  status: str = ""
  done: bool = False
  info: dict = dataclasses.field(default_factory=dict)
  env_seconds: float = 0.0
  calls: list[dict] = dataclasses.field(default_factory=list)
  reasoning: str | None = None
  truncated: bool = False
  observation_ids: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Trajectory:
  """One episode (rollout) of one task.

  Attributes:
    episode: index of the rollout in its run.
    task_id: the task.
    group: index of the task in the run's task list (the GRPO group id).
    sample: index of the rollout within its group, in [0, G).
    seed: the seed passed to env.reset.
    initial_observation: what env.reset returned.
    turns: the turns, in order.
    termination: one of TERMINATIONS.
    error: for 'env_error': '<reason>: <detail>' (reason: crash, timeout, start, protocol,
      env_exception); else None.
    reward: outcome reward (RolloutDriver's reward_fn; 0.0 after an env_error).
    worker: index of the pool slot that ran it.
  """
  episode: int
  task_id: str
  group: int
  sample: int
  seed: int
  initial_observation: str = ""
  turns: list[Turn] = dataclasses.field(default_factory=list)
  termination: str | None = None
  error: str | None = None
  reward: float = 0.0
  worker: int = -1

  @property
  def num_turns(self) -> int:
    return len(self.turns)

  @property
  def final_info(self) -> dict:
    return self.turns[-1].info if self.turns else {}

  def token_ids(self) -> np.ndarray:
    """i32[L]: the whole context, prompt_0 + response_0 + prompt_1 + ..."""
    out: list[int] = []
    for t in self.turns:
      out.extend(t.prompt_ids)
      out.extend(t.response_ids)
    return np.asarray(out, dtype=np.int32)

  def policy_mask(self) -> np.ndarray:
    """bool[L]: True on the policy's own (response) tokens only."""
    parts = []
    for t in self.turns:
      parts.append(np.zeros(len(t.prompt_ids), bool))
      parts.append(np.ones(len(t.response_ids), bool))
    return np.concatenate(parts) if parts else np.zeros(0, bool)

  def turn_ids(self) -> np.ndarray:
    """i32[L]: turn index of each response token, -1 on prompt/observation tokens."""
    parts = []
    for k, t in enumerate(self.turns):
      parts.append(np.full(len(t.prompt_ids), -1, np.int32))
      parts.append(np.full(len(t.response_ids), k, np.int32))
    return np.concatenate(parts) if parts else np.zeros(0, np.int32)

  def turn_spans(self) -> list[tuple[int, int]]:
    """[start, end) of each turn's response in token_ids(); the turn boundaries."""
    spans, pos = [], 0
    for t in self.turns:
      pos += len(t.prompt_ids)
      spans.append((pos, pos + len(t.response_ids)))
      pos += len(t.response_ids)
    return spans

  @property
  def response_truncated(self) -> bool:
    """Some response of this episode was cut by its token budget."""
    return any(t.truncated for t in self.turns)

  def truncated_mask(self) -> np.ndarray:
    """bool[L]: True on the tokens of responses cut by their budget."""
    parts = []
    for t in self.turns:
      parts.append(np.zeros(len(t.prompt_ids), bool))
      parts.append(np.full(len(t.response_ids), bool(t.truncated)))
    return np.concatenate(parts) if parts else np.zeros(0, bool)

  def logprobs(self) -> np.ndarray:
    """f32[L]: sampler log-probs on response tokens (0 where absent or not a policy token)."""
    parts = []
    for t in self.turns:
      parts.append(np.zeros(len(t.prompt_ids), np.float32))
      lp = t.response_logprobs
      parts.append(np.asarray(lp, np.float32) if lp is not None and len(lp) == len(t.response_ids)
                   else np.zeros(len(t.response_ids), np.float32))
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)

  def summary(self) -> dict[str, Any]:
    return {"episode": self.episode, "task_id": self.task_id, "sample": self.sample,
            "turns": self.num_turns, "termination": self.termination, "error": self.error,
            "truncated_responses": sum(t.truncated for t in self.turns),
            "parse_errors": sum(t.status == "parse_error" for t in self.turns),
            "reward": self.reward, "tokens": int(sum(len(t.prompt_ids) + len(t.response_ids)
                                                     for t in self.turns))}


def termination_code(termination: str | None) -> int:
  """Index of `termination` in TERMINATIONS; -1 for None (an episode that never ended)."""
  return TERMINATIONS.index(termination) if termination is not None else -1


def collate(trajectories: Sequence[Trajectory], *, max_len: int | None = None,
            pad_id: int = 0, mask_truncated_responses: bool = False) -> dict[str, np.ndarray]:
  """Pads trajectories into batch arrays for the trainer.

  Args:
    trajectories: B trajectories.
    max_len: L; default the longest context. Longer contexts are cut at L (flag `truncated`).
    pad_id: token id used for padding.
    mask_truncated_responses: leave responses cut by their token budget out of policy_mask (the
      trainer's choice; the tokens stay in `tokens` as context).
  Returns:
    dict with tokens i32[B, L], policy_mask bool[B, L] (False on padding), turn_ids i32[B, L]
    (-1 off-response), logprobs f32[B, L], truncated_mask bool[B, L] (tokens of cut responses),
    lengths i32[B], rewards f32[B], group_ids i32[B], num_turns i32[B], truncated bool[B] (context cut
    at L), response_truncated bool[B] (some response cut by its budget), env_error bool[B],
    termination i32[B] (`termination_code`: index into TERMINATIONS, -1 if none).
  """
  b = len(trajectories)
  toks = [t.token_ids() for t in trajectories]
  L = max_len if max_len is not None else max([len(x) for x in toks] + [1])
  out = {
      "tokens": np.full((b, L), pad_id, np.int32), "policy_mask": np.zeros((b, L), bool),
      "turn_ids": np.full((b, L), -1, np.int32), "logprobs": np.zeros((b, L), np.float32),
      "lengths": np.zeros(b, np.int32), "rewards": np.zeros(b, np.float32),
      "group_ids": np.zeros(b, np.int32), "num_turns": np.zeros(b, np.int32),
      "truncated": np.zeros(b, bool), "env_error": np.zeros(b, bool),
      "truncated_mask": np.zeros((b, L), bool), "response_truncated": np.zeros(b, bool),
      "termination": np.zeros(b, np.int32),
  }
  for i, (t, x) in enumerate(zip(trajectories, toks)):
    n = min(len(x), L)
    out["tokens"][i, :n] = x[:n]
    cut = t.truncated_mask()[:n]
    out["truncated_mask"][i, :n] = cut
    out["policy_mask"][i, :n] = t.policy_mask()[:n] & ~cut if mask_truncated_responses else t.policy_mask()[:n]
    out["turn_ids"][i, :n] = t.turn_ids()[:n]
    out["logprobs"][i, :n] = t.logprobs()[:n]
    out["lengths"][i] = n
    out["rewards"][i] = t.reward
    out["group_ids"][i] = t.group
    out["num_turns"][i] = t.num_turns
    out["truncated"][i] = len(x) > L
    out["env_error"][i] = t.termination == "env_error"
    out["response_truncated"][i] = t.response_truncated
    out["termination"][i] = termination_code(t.termination)
  return out

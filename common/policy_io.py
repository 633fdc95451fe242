"""What the rollout driver hands a policy and gets back: `PolicyRequest`, `PolicyOutput`, `Policy`.

Below both the agent loop (`common/rollout.py`, which asks) and the language-model sampler
(`common/lm/sampler.py`, which answers), so that `common/lm/` does not import the rollout stack.

Policy interface: `policy(requests: list[PolicyRequest]) -> list[PolicyOutput]`, one output per request, in
order. A language-model sampler implements it by generating up to `max_new_tokens` after `token_ids`;
`common.rollout.ScriptedPolicy` implements it from a function of the request (tests, gold replays).
"""

from __future__ import annotations

from typing import Callable, NamedTuple


class PolicyRequest(NamedTuple):
  """One episode asking for its next response.

  Attributes:
    episode: rollout index in this run; task_id, sample (g in [0, G)), turn: where it is.
    token_ids: the whole context so far (list[int]; mode 'window': this turn's whole prompt); the
      policy generates a continuation.
    max_new_tokens: most tokens the response may have (turn cap and context room).
  """
  episode: int
  task_id: str
  sample: int
  turn: int
  token_ids: list[int]
  max_new_tokens: int


class PolicyOutput(NamedTuple):
  """The policy's response.

  Attributes:
    token_ids: the response (the end-of-turn / stop token included if it made one).
    logprobs: the sampler's log-probs of token_ids, or None.
    truncated: True if generation stopped at max_new_tokens; None: inferred (the last token is not
      one of ChatTemplate.stop_ids).
  """
  token_ids: list[int]
  logprobs: list[float] | None = None
  truncated: bool | None = None


Policy = Callable[[list[PolicyRequest]], list[PolicyOutput]]

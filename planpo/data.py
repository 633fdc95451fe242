"""PlanPO's SFT data: TextWorldExpress gold trajectories made wasteful, in the windowed rollout format.

  episodes = gold_episodes(pool.workers[0], task_ids, config=config, seed=0)   # text only
  corpus = tokenizer_corpus(episodes, config)        # train the tiny tokenizer on these
  rows = sft_rows(episodes, chat, config)            # [(prompt_ids, response_ids)], one per turn

Each episode replays the simulator's gold action sequence (the env's `gold_actions` query) through the
same environment worker API the rollouts use, with inserted detours: valid but unneeded admissible
actions ('look around', 'inventory', or a move followed by the move back), each turn preceded with
probability `sft.detour_prob`, at most `sft.max_detours` per episode. Every reply is
'<think>REASONING</think><action>ACTION</action>' with a reasoning of a varied number of filler
sentences (uniform in [`sft.think_min_sentences`, `sft.think_max_sentences`]). The SFT policy thus
learns to succeed often but wastefully (extra turns, long replies): room for PlanPO's length terms
(issue 10, item 3). An episode the replay does not win is dropped.

The window state of each turn is advanced by the driver's own functions (common.windowed.start /
on_response / on_step) and rendered by common.windowed.prompt_ids with the driver's observation clip
(common.tool_wire.truncate_output at `rollout.max_observation_chars`) and no system message, so SFT
prompts are token for token what the rollout driver (planpo/rollouts.py) shows the policy.
Config keys `sft.detour_prob`, `sft.max_detours`, `sft.think_min_sentences`, `sft.think_max_sentences`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
from typing import Any, Sequence

import numpy as np

from common import tool_wire
from common import windowed as win_lib

_log = logging.getLogger(__name__)

FILLER = ("I look at what the room holds.", "The goal is not reached yet.", "Let me think about the exits.",
          "I should keep the task in mind.", "Nothing here changes the plan.", "I check the admissible actions.",
          "This step follows from the observation.", "I remember the rooms I have seen.",
          "It is worth being careful here.", "The next move should help.")
HARMLESS = ("look around", "inventory")
_REVERSE = {"north": "south", "south": "north", "east": "west", "west": "east"}


@dataclasses.dataclass
class EpisodeTurn:
  """One SFT turn: the window state the policy sees (before the turn) and the reply it should give."""
  state: win_lib.WindowState
  response: str
  detour: bool


def window_config(config) -> win_lib.WindowConfig:
  """common.windowed.WindowConfig from config keys `rollout.window.*`."""
  return win_lib.WindowConfig(**{k: config.rollout.window[k] for k in win_lib.WindowConfig._fields})


def clip_fn(config):
  """The driver's observation clip (RolloutDriver._clip) at `rollout.max_observation_chars`."""
  return functools.partial(tool_wire.truncate_output, limit=int(config.rollout.max_observation_chars))


def reply(action: str, n_sentences: int, rng: np.random.Generator) -> str:
  """'<think>I will ACTION. [fillers]</think><action>ACTION</action>' with n_sentences fillers."""
  fill = [FILLER[i] for i in rng.integers(0, len(FILLER), size=n_sentences)]
  return "<think>" + " ".join([f"I will {action}."] + fill) + f"</think><action>{action}</action>"


def _detour(admissible: Sequence[str], gold_next: str, rng, moves: bool = True) -> list[str]:
  """A detour from this state: a harmless action, or (moves) a move and the move back (not the gold action)."""
  opts = [[a] for a in HARMLESS if a in admissible and a != gold_next]
  for a in admissible if moves else ():
    parts = a.split()
    if a != gold_next and len(parts) == 2 and parts[0] == "move" and parts[1] in _REVERSE:
      opts.append([a, f"move {_REVERSE[parts[1]]}"])
  return list(opts[rng.integers(len(opts))]) if opts else []


def _act(a: str) -> dict:
  return {"name": "action", "arguments": {"action": a}}


def gold_episode(worker, task_id: str, *, config, rng: np.random.Generator,
                 moves: bool = True) -> list[EpisodeTurn] | None:
  """Replays one task's gold actions with detours on `worker` (a common.env_pool worker); None if not won.
  moves: detours may be a move and the move back (which can strand the replay: then None)."""
  s, cfg = config.sft, window_config(config)
  gold = list(worker.query("gold_actions", task_id=task_id))
  obs = worker.reset(task_id, 0)
  state = win_lib.start(obs, worker.query("episode_info"))
  plan: list[tuple[str, bool]] = []
  turns: list[EpisodeTurn] = []
  detours = 0
  i = 0
  won = False
  while i < len(gold) or plan:
    if not plan:
      if detours < s.max_detours and rng.random() < s.detour_prob and state.admissible:
        d = _detour(state.admissible, gold[i], rng, moves)
        if d:
          detours += 1
          plan = [(d[0], True)]
          if len(d) > 1:
            plan.append((d[1], True))   # the move back is planned only if still admissible then
      if not plan:
        plan, i = [(gold[i], False)], i + 1
    action, is_detour = plan.pop(0)
    if is_detour and state.admissible is not None and action not in state.admissible:
      plan = []
      continue
    text = reply(action, int(rng.integers(s.think_min_sentences, s.think_max_sentences + 1)), rng)
    turns.append(EpisodeTurn(copy.deepcopy(state), text, is_detour))
    turn = win_lib.WindowTurn(prompt_ids=[], response_ids=[])
    win_lib.on_response(turn, state, win_lib.parse(text, cfg), cfg)
    res = worker.step(_act(action))
    win_lib.on_step(turn, state, res.status, res.observation, res.info, cfg)
    won = bool(res.info.get("won"))
    if res.done:
      break
  return turns if won and len(turns) <= config.env.max_turns else None


def gold_episodes(worker, task_ids: Sequence[str], *, config, seed: int) -> list[list[EpisodeTurn]]:
  """gold_episode of every task (numpy seed [seed, 5]); an episode not won (or over env.max_turns) is replayed
  with harmless detours only, and dropped if that fails too."""
  rng = np.random.default_rng([seed, 5])
  out = []
  for t in task_ids:
    ep = gold_episode(worker, t, config=config, rng=rng)
    if ep is None:
      ep = gold_episode(worker, t, config=config, rng=rng, moves=False)
    if ep is None:
      _log.warning("SFT: the gold replay of %s was not won within env.max_turns; dropped", t)
      continue
    out.append(ep)
  return out


def tokenizer_corpus(episodes: Sequence[Sequence[EpisodeTurn]], config) -> list[str]:
  """The rendered user messages and replies of the episodes (the tiny tokenizer's training text)."""
  cfg, clip = window_config(config), clip_fn(config)
  return [x for ep in episodes for t in ep for x in (win_lib.render(t.state, cfg, clip), t.response)]


def sft_rows(episodes: Sequence[Sequence[EpisodeTurn]], chat, config) -> list[tuple[list[int], list[int]]]:
  """(prompt_ids, response_ids) per turn: the driver's prompt and the reply's tokens + end-of-turn id."""
  cfg, clip = window_config(config), clip_fn(config)
  out = []
  for ep in episodes:
    for t in ep:
      prompt = win_lib.prompt_ids(chat, t.state, cfg, system=None, clip=clip)
      out.append((list(prompt), list(chat.encode(t.response)) + [chat.end_id]))
  return out


def episode_stats(episodes: Sequence[Sequence[EpisodeTurn]]) -> dict[str, Any]:
  """sft/episodes, sft/turns (mean), sft/detour_turns (mean per episode)."""
  n = max(1, len(episodes))
  return {"sft/episodes": len(episodes), "sft/turns": sum(len(e) for e in episodes) / n,
          "sft/detour_turns": sum(t.detour for e in episodes for t in e) / n}

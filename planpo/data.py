"""PlanPO's SFT data: the environment's gold trajectories made wasteful, or scripted explorers' wins.

Two sources (config key `sft.source`): 'gold' (this module, below) and 'explorers' (planpo/explorers.py: the
successful episodes of oracle-free scripted walks, `sft.explorers`, `sft.explorer_rollouts` per task; the
explorer regime of configs/planpo_twx.py:explore, where a hindsight path to an unseen coin would teach a
privileged policy). `sft_episodes` dispatches.

  corpus = tokenizer_corpus(gold_episodes(pool, task_ids, config=config, seed=0))   # text only
  episodes = gold_episodes(pool, task_ids, config=config, seed=s, chat=policy.chat)
  rows = sft_rows(episodes)                          # [(prompt_ids, response_ids)], one per turn

Each episode is played by THE driver (common.rollout.RolloutDriver, mode 'window', the same window
settings as the RL rollouts) with a common.rollout.ScriptedPolicy that replays the simulator's gold action
sequence (the env's `gold_actions` query) with inserted detours: valid but unneeded admissible actions
(one of `sft.harmless_actions`, e.g. 'look around' or 'inventory'; with `sft.move_detours`, also a
TextWorldExpress 'move <dir>' followed by the move back), each turn preceded with probability
`sft.detour_prob`, at most `sft.max_detours` per episode. Every reply is
'<think>REASONING</think><action>ACTION</action>' with a reasoning of a varied number of filler
sentences (uniform in [`sft.think_min_sentences`, `sft.think_max_sentences`]). The SFT policy thus
learns to succeed often but wastefully (extra turns, long replies): room for PlanPO's length terms
(issue 10, item 3). An episode the driver does not end with a win within `env.max_turns` is dropped.

SFT rows are the driver's own turn records (prompt_ids, response_ids), so SFT prompts are token for token
what the rollouts (planpo/rollouts.py) show the policy: window rendering, observation clip at
`rollout.max_observation_chars`, no system message. Before a tokenizer exists (the tokenizer corpus), the
episodes are played with a byte-level fallback chat; only their text is used then.
An episode the environment fails (a crashed or timed-out worker) is played again from the same random
state, up to `sft.env_retries` times, so the data does not depend on the machine's load.
Config keys `sft.detour_prob`, `sft.max_detours`, `sft.think_min_sentences`, `sft.think_max_sentences`,
`sft.harmless_actions`, `sft.move_detours`, `sft.env_retries`.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Sequence

import numpy as np

from common import chat as chat_lib
from common import rollout as rollout_lib
from common import trajectory as traj_lib
from common import windowed as win_lib
from common.envs.twx_env import OPPOSITE

_log = logging.getLogger(__name__)

FILLER = ("I look at what the room holds.", "The goal is not reached yet.", "Let me think about the exits.",
          "I should keep the task in mind.", "Nothing here changes the plan.", "I check the admissible actions.",
          "This step follows from the observation.", "I remember the rooms I have seen.",
          "It is worth being careful here.", "The next move should help.")
NO_ACTION = "<think>The gold actions are done.</think>"


@dataclasses.dataclass
class EpisodeTurn:
  """One SFT turn, as the rollout driver recorded it.

  Attributes:
    prompt_text: the turn's user message (common.windowed.render of the window the policy saw).
    response: the reply text.
    prompt_ids / response_ids: the driver's prompt tokens and the reply's tokens + end-of-turn id
      (list[int], in the chat the episodes were played with).
    detour: the action was a detour, not a gold action.
  """
  prompt_text: str
  response: str
  prompt_ids: list[int]
  response_ids: list[int]
  detour: bool


def window_config(config) -> win_lib.WindowConfig:
  """common.windowed.WindowConfig from config keys `rollout.window.*`."""
  return win_lib.WindowConfig(**{k: config.rollout.window[k] for k in win_lib.WindowConfig._fields})


def reply(action: str, n_sentences: int, rng: np.random.Generator) -> str:
  """'<think>I will ACTION. [fillers]</think><action>ACTION</action>' with n_sentences fillers."""
  fill = [FILLER[i] for i in rng.integers(0, len(FILLER), size=n_sentences)]
  return "<think>" + " ".join([f"I will {action}."] + fill) + f"</think><action>{action}</action>"


def _detour(admissible: Sequence[str], gold_next: str, rng, harmless: Sequence[str],
            moves: bool = True) -> list[str]:
  """A detour from this state: a harmless action, or (moves) a move and the move back (not the gold action)."""
  opts = [[a] for a in harmless if a in admissible and a != gold_next]
  for a in admissible if moves else ():
    parts = a.split()
    if a != gold_next and len(parts) == 2 and parts[0] == "move" and parts[1] in OPPOSITE:
      opts.append([a, f"move {OPPOSITE[parts[1]]}"])
  return list(opts[rng.integers(len(opts))]) if opts else []


class _RecordingChat(chat_lib.ChatTemplate):
  """A ChatTemplate that remembers the user message of the last prompt it rendered (`last_user_text`) and of
  every prompt, by its token ids (`texts`: episodes the driver runs side by side, planpo.explorers)."""

  last_user_text = ""

  @classmethod
  def like(cls, chat) -> "_RecordingChat":
    """The same chat format as `chat` (a ChatTemplate, with all its settings, or a tokenizer)."""
    base = chat if isinstance(chat, chat_lib.ChatTemplate) else chat_lib.ChatTemplate(chat)
    rec = object.__new__(cls)
    rec.__dict__.update(vars(base))
    rec.texts = {}
    return rec

  def prompt_ids(self, messages, tools=None):
    self.last_user_text = str(messages[-1]["content"])
    ids = super().prompt_ids(messages, tools)
    self.texts[tuple(ids)] = self.last_user_text
    return ids


class _GoldScript:
  """ScriptedPolicy script of one episode: the gold actions with detours (module docstring).

  The detour choice reads the admissible actions of the current state from the worker the driver runs
  the episode on (`RolloutDriver.worker_for`: its 'admissible_actions' query, the list the prompt shows).
  """

  def __init__(self, gold: Sequence[str], config, rng: np.random.Generator, moves: bool):
    self.gold, self.s, self.rng = list(gold), config.sft, rng
    self.moves = bool(moves and config.sft.get("move_detours", False))
    self.harmless = tuple(config.sft.get("harmless_actions", ("look around", "inventory")))
    self.driver = self.chat = None
    self.plan: list[tuple[str, bool]] = []
    self.i = self.detours = 0
    self.turns: list[tuple[str, str, bool]] = []   # (prompt_text, response, detour) per turn

  def __call__(self, request) -> str:
    s, rng = self.s, self.rng
    cache = []

    def admissible() -> list[str]:   # queried only when a detour needs it (ScienceWorld: ~80 ms a query)
      if not cache:
        cache.append(list(self.driver.worker_for(request.episode).query("admissible_actions")))
      return cache[0]

    while self.i < len(self.gold) or self.plan:
      if not self.plan:
        if self.detours < s.max_detours and rng.random() < s.detour_prob and admissible():
          d = _detour(admissible(), self.gold[self.i], rng, self.harmless, self.moves)
          if d:
            self.detours += 1
            self.plan = [(a, True) for a in d]   # the move back is played only if still admissible then
        if not self.plan:
          self.plan, self.i = [(self.gold[self.i], False)], self.i + 1
      action, is_detour = self.plan.pop(0)
      if is_detour and action not in admissible():
        self.plan = []
        continue
      text = reply(action, int(rng.integers(s.think_min_sentences, s.think_max_sentences + 1)), rng)
      self.turns.append((self.chat.last_user_text, text, is_detour))
      return text
    self.turns.append((self.chat.last_user_text, NO_ACTION, False))
    return NO_ACTION   # the gold actions ran out before a win: an unreadable reply until the turn limit


def driver_config(config, max_turns: int | None = None) -> rollout_lib.RolloutConfig:
  """The rollout driver's settings for SFT data: window mode, one episode (reset seed 0), `max_turns`
  (default `env.max_turns`), `rollout.max_observation_chars`; no token limit (SFT rows are never cut)."""
  max_turns = int(config.env.max_turns if max_turns is None else max_turns)
  return rollout_lib.RolloutConfig(group_size=1, max_turns=max_turns, max_context_tokens=1 << 30,
                                   max_response_tokens=1 << 30,
                                   max_observation_chars=int(config.rollout.max_observation_chars), seed=0,
                                   seed_mode="fixed", mode="window", window=window_config(config))


class GoldReplayEnvError(RuntimeError):
  """The environment failed while a gold replay ran (the driver ended the episode 'env_error': a crashed
  or hung worker, e.g. a ScienceWorld step past the driver's timeout on a loaded machine)."""


def gold_episode(pool, task_id: str, *, config, rng: np.random.Generator, chat=None,
                 moves: bool = True) -> list[EpisodeTurn] | None:
  """One task's gold actions with detours, played by common.rollout.RolloutDriver (window mode) with a
  common.rollout.ScriptedPolicy on `pool` (a common.env_pool.WorkerPool of TwxToolEnv); None if not won.

  chat: the common.chat.ChatTemplate (or tokenizer) of the prompts; None: a byte-level fallback chat
  (the text is what matters: the tokenizer corpus before a tokenizer exists).
  moves: detours may be a move and the move back (which can strand the replay: then None).
  Raises:
    GoldReplayEnvError: the episode ended 'env_error' (the message has the driver's reason). The draws
      taken from `rng` are then not those of a finished replay: gold_episodes retries from its saved state.
  """
  if not pool.is_whole() and not pool.wait_until_whole():
    raise GoldReplayEnvError(f"SFT gold replay of {task_id}: the environment pool did not become whole "
                             "again (a worker failed to restart); see the EnvError messages logged above")
  rec = _RecordingChat.like(chat if chat is not None else traj_lib.ByteTokenizer())
  gold = list(pool.workers[0].query("gold_actions", task_id=task_id))
  script = _GoldScript(gold, config, rng, moves)
  # The script is played to its end (every gold action and detour, at most 2 actions each), and an episode
  # longer than env.max_turns is dropped afterwards: the random draws per task do not depend on the limit.
  limit = len(gold) + 2 * int(config.sft.max_detours) + 1
  driver = rollout_lib.RolloutDriver(pool, rollout_lib.ScriptedPolicy(script, rec), rec,
                                     config=driver_config(config, limit))
  script.driver, script.chat = driver, rec
  traj = driver.run([task_id])[0]
  if traj.termination == "env_error":
    raise GoldReplayEnvError(f"SFT gold replay of {task_id} (turn {len(traj.turns)}): {traj.error}")
  if not traj.success or traj.termination != "done" or len(traj.turns) > int(config.env.max_turns):
    return None
  return [EpisodeTurn(text, response, list(t.prompt_ids), list(t.response_ids), detour)
          for (text, response, detour), t in zip(script.turns, traj.turns)]


def _replay(pool, task_id: str, *, config, rng: np.random.Generator, chat, moves: bool):
  """gold_episode, played again from the same rng state after an environment failure, so that a crashed or
  timed-out worker never changes the draws (and so the data) of this or any later task; at most
  `sft.env_retries` retries, then the last GoldReplayEnvError is raised with the fix."""
  retries = int(config.sft.get("env_retries", 3))
  state = rng.bit_generator.state
  for attempt in range(retries + 1):
    try:
      return gold_episode(pool, task_id, config=config, rng=rng, chat=chat, moves=moves)
    except GoldReplayEnvError as err:
      rng.bit_generator.state = state
      if attempt == retries:
        raise GoldReplayEnvError(
            f"{err}; it failed {retries + 1} times in a row. Fix: see the "
            "worker's error above (a timeout: give the machine fewer concurrent jobs, or raise "
            "sft.env_retries)") from err
      _log.warning("%s; replaying it from the same random state (retry %d of %d)", err, attempt + 1, retries)
  raise AssertionError("unreachable")


def gold_episodes(pool, task_ids: Sequence[str], *, config, seed: int, chat=None) -> list[list[EpisodeTurn]]:
  """gold_episode of every task (numpy seed [seed, 5]); an episode not won (or over env.max_turns) is replayed
  with harmless detours only, and dropped if that fails too. An environment failure (GoldReplayEnvError) is
  not "not won": that replay is played again from the random state it started with (`sft.env_retries`
  times), so the episodes are the same on a loaded machine as on an idle one.

  Raises:
    GoldReplayEnvError: one replay failed `sft.env_retries` + 1 times in a row.
  """
  rng = np.random.default_rng([seed, 5])
  out = []
  for t in task_ids:
    ep = _replay(pool, t, config=config, rng=rng, chat=chat, moves=True)
    if ep is None:
      ep = _replay(pool, t, config=config, rng=rng, chat=chat, moves=False)
    if ep is None:
      _log.warning("SFT: the gold replay of %s was not won within env.max_turns; dropped", t)
      continue
    out.append(ep)
  return out


SOURCES = ("gold", "explorers")


def sft_episodes(pool, task_ids: Sequence[str], *, config, seed: int, chat=None) -> list[list[EpisodeTurn]]:
  """The SFT episodes of `sft.source`: 'gold' (gold_episodes) or 'explorers' (planpo.explorers.explorer_episodes).

  Raises:
    ValueError: an unknown `sft.source`.
  """
  source = str(config.sft.get("source", "gold"))
  if source == "gold":
    return gold_episodes(pool, task_ids, config=config, seed=seed, chat=chat)
  if source == "explorers":
    from planpo import explorers  # pylint: disable=g-import-not-at-top
    return explorers.explorer_episodes(pool, task_ids, config=config, seed=seed, chat=chat)
  raise ValueError(f"config `sft.source` must be one of {SOURCES}, got {source!r}")


def tokenizer_corpus(episodes: Sequence[Sequence[EpisodeTurn]]) -> list[str]:
  """The rendered user messages and replies of the episodes (the tiny tokenizer's training text)."""
  return [x for ep in episodes for t in ep for x in (t.prompt_text, t.response)]


def sft_rows(episodes: Sequence[Sequence[EpisodeTurn]]) -> list[tuple[list[int], list[int]]]:
  """(prompt_ids, response_ids) per turn: the driver's prompt and the reply's tokens + end-of-turn id."""
  return [(list(t.prompt_ids), list(t.response_ids)) for ep in episodes for t in ep]


def episode_stats(episodes: Sequence[Sequence[EpisodeTurn]]) -> dict[str, Any]:
  """sft/episodes, sft/turns (mean), sft/detour_turns (mean per episode)."""
  n = max(1, len(episodes))
  return {"sft/episodes": len(episodes), "sft/turns": sum(len(e) for e in episodes) / n,
          "sft/detour_turns": sum(t.detour for e in episodes for t in e) / n}

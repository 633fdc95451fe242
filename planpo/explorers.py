"""Oracle-free scripted explorers of TextWorldExpress's coin collector: SFT data and reference rows.

  policy = Explorer("depth_first", chat, seed=0)             # a common.rollout policy (reads the env)
  trajs = planpo.rollouts.run_rollouts(pool, policy, chat, tasks, config=config, group_size=2, seed=0)
  episodes = explorer_episodes(pool, tasks, config=config, seed=0, chat=chat)   # SFT data (planpo.data)

Four explorers, none of which knows where the coin is (issue 25: the SFT data must not come from the
simulator's hindsight path):
  random        a uniformly random admissible action (moves, 'look around', 'inventory', 'take coin' when the
                coin is in view): planpo.train.RandomAdmissible's behaviour, as SFT data.
The other three take the coin as soon as 'take coin' is admissible (the coin is in view) and otherwise move:
  random_walk   a uniformly random move among the admissible 'move <dir>' actions;
  memory_walk   the same, never straight back through the door it came in by unless that is the only exit
                (a one-step memory: the previous action);
  depth_first   depth-first search over the rooms named in the observations ('To the North you see the
                pantry.'): the first exit (north, south, east, west order) to a room not yet entered, else
                one step back along the path it came by. Reads exactly what the policy's prompt shows;
                the table's reference row (the shortest an observation-only explorer gets on these games).
Replies are '<think>I will A. [fillers]</think><action>A</action>' (planpo.data.reply: 0 to
`sft.think_max_sentences` filler sentences, uniform), so the SFT data is wasteful in turns (the walks) and in
tokens (the fillers). Random draws are numpy [seed, 29, explorer index, episode index]: the same episodes
whatever the order the driver runs them in.

Reads from the environment (its query methods, through the worker the driver runs the episode on):
`episode_info()` ('observation', 'admissible_actions'), as common.envs.twx_env.TwxToolEnv offers.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from common import rollout as rollout_lib
from common import trajectory as traj_lib
from common.envs.twx_env import OPPOSITE, location

EXPLORERS = ("random", "random_walk", "memory_walk", "depth_first")
_EXIT = re.compile(r"To the (North|South|East|West) you see the ([^.]+)\.")
_DIRS = ("north", "south", "east", "west")


def exits(observation: str) -> dict[str, str]:
  """{direction: room} of the exits an observation names ('To the North you see the pantry.')."""
  return {d.lower(): room.strip() for d, room in _EXIT.findall(observation)}


class _Walker:
  """One episode's explorer state (module docstring)."""

  def __init__(self, kind: str, rng: np.random.Generator):
    if kind not in EXPLORERS:
      raise ValueError(f"unknown explorer {kind!r}; valid: {EXPLORERS} (config key `sft.explorers`)")
    self.kind, self.rng = kind, rng
    self.prev: str | None = None          # the previous move's direction
    self.entered: set[str] = set()
    self.path: list[str] = []             # depth_first: the directions taken from the start to here

  def act(self, observation: str, admissible: Sequence[str]) -> str:
    if self.kind == "random":
      return str(admissible[int(self.rng.integers(len(admissible)))]) if admissible else "look around"
    if "take coin" in admissible:
      return "take coin"
    moves = [a.split()[1] for a in admissible if a.startswith("move ") and a.split()[1] in OPPOSITE]
    if not moves:
      return "look around"
    here = location(observation)
    if here:
      self.entered.add(here)
    if self.kind == "depth_first":
      named = exits(observation)
      new = [d for d in _DIRS if d in moves and named.get(d) and named[d] not in self.entered]
      if new:
        self.path.append(new[0])
        return f"move {new[0]}"
      if self.path:
        return f"move {OPPOSITE[self.path.pop()]}"
      d = moves[int(self.rng.integers(len(moves)))]   # every named room entered and back at the start
      return f"move {d}"
    if self.kind == "memory_walk" and self.prev is not None and len(moves) > 1:
      moves = [d for d in moves if d != OPPOSITE[self.prev]]
    d = moves[int(self.rng.integers(len(moves)))]
    self.prev = d
    return f"move {d}"


class Explorer:
  """A scripted explorer (`kind`, one of EXPLORERS) as a common.rollout policy; module docstring.

  Args:
    kind: one of EXPLORERS.
    chat: the ChatTemplate (or tokenizer) the replies are encoded with.
    seed: numpy seed [seed, 29, EXPLORERS.index(kind), episode].
    think_sentences: (min, max) filler sentences per reply (planpo.data.reply); (0, 0): 'I will A.' only.
  Raises:
    ValueError: unknown kind.
  """

  def __init__(self, kind: str, chat, seed: int, think_sentences: tuple[int, int] = (0, 0)):
    if kind not in EXPLORERS:
      raise ValueError(f"unknown explorer {kind!r}; valid: {EXPLORERS} (config key `sft.explorers`)")
    from planpo import data  # pylint: disable=g-import-not-at-top  (data imports this module)
    self._reply = data.reply
    self.kind, self.seed, self.think = kind, int(seed), (int(think_sentences[0]), int(think_sentences[1]))
    self.driver = None
    self.walkers: dict[int, tuple[_Walker, np.random.Generator]] = {}
    self._scripted = rollout_lib.ScriptedPolicy(self._script, chat)

  def attach(self, driver) -> None:
    """Called by planpo.rollouts.run_rollouts with the driver that runs the episodes."""
    self.driver = driver
    self.walkers = {}

  def _script(self, request) -> str:
    if request.episode not in self.walkers:
      rng = np.random.default_rng([self.seed, 29, EXPLORERS.index(self.kind), int(request.episode)])
      self.walkers[request.episode] = (_Walker(self.kind, rng), np.random.default_rng(
          [self.seed, 31, EXPLORERS.index(self.kind), int(request.episode)]))
    walker, text_rng = self.walkers[request.episode]
    worker = self.driver.worker_for(request.episode) if self.driver else None
    info = dict(worker.query("episode_info")) if worker is not None else {}
    action = walker.act(str(info.get("observation", "")), list(info.get("admissible_actions", [])))
    lo, hi = self.think
    return self._reply(action, int(text_rng.integers(lo, hi + 1)), text_rng)

  def __call__(self, requests):
    return self._scripted(requests)


def explorer_episodes(pool, task_ids: Sequence[str], *, config, seed: int, chat=None) -> list:
  """SFT episodes from the scripted explorers of `sft.explorers` (default random, memory_walk):
  `sft.explorer_rollouts` episodes per task and explorer through common.rollout.RolloutDriver (window mode,
  the rollouts' settings, turn limit `env.max_turns`); failures are dropped (issue 25, item 1).

  Returns:
    list of episodes, each a list of planpo.data.EpisodeTurn (prompt_text, response, prompt_ids,
    response_ids, detour False), ordered by (explorer, task, rollout).
  Raises:
    ValueError: an unknown explorer name (config key `sft.explorers`).
    RuntimeError: an episode ended 'env_error' (a crashed or hung worker); the message has the driver's reason.
  """
  from planpo import data  # pylint: disable=g-import-not-at-top
  rec = data._RecordingChat.like(chat if chat is not None else traj_lib.ByteTokenizer())
  s = config.sft
  think = (int(s.think_min_sentences), int(s.think_max_sentences))
  k = int(s.get("explorer_rollouts", 1))
  out = []
  for kind in tuple(s.get("explorers", ("random", "memory_walk"))):
    policy = Explorer(kind, rec, seed, think)
    cfg = data.driver_config(config)._replace(group_size=k, max_context_tokens=1 << 30,
                                               max_response_tokens=1 << 30)
    driver = rollout_lib.RolloutDriver(pool, policy, rec, config=cfg)
    policy.attach(driver)
    for t in driver.run(list(task_ids)):
      if t.termination == "env_error":
        raise RuntimeError(f"SFT explorer {kind} on {t.task_id} (turn {len(t.turns)}): {t.error}; the "
                           "environment failed (see the worker's log above); rerun, or give the machine fewer jobs")
      if not t.success:
        continue
      out.append([data.EpisodeTurn(rec.texts.get(tuple(tn.prompt_ids), ""), chat_text(rec, tn.response_ids),
                                   list(tn.prompt_ids), list(tn.response_ids), False) for tn in t.turns])
  return out


def chat_text(chat, ids: Sequence[int]) -> str:
  """The reply text of response ids (the end-of-turn id dropped)."""
  ids = [i for i in ids if i != chat.end_id]
  return chat.decode(ids) if hasattr(chat, "decode") else ""

"""TextWorldExpress as a tool environment (ToolEnv surface), for serving from a sandboxed process.

TextWorldExpress (Jansen and Cote 2023, "TextWorldExpress: Simulating Text Games at One Million Steps
Per Second", EACL demo, arXiv:2208.01174; PyPI `textworld-express` 1.1.0, which bundles the Scala
simulator as a jar run by a Java runtime: Debian package `default-jre-headless`, reached through py4j)
re-implements text-game benchmarks with sub-millisecond steps. The four games used here:
  coin          CoinCollector: find the coin somewhere in the house and take it;
  mapreader     MapReader: read the map, fetch the coin from a named room, bring it to the box;
  cookingworld  CookingWorld (First TextWorld Problems): read the cookbook, gather and prepare the
                ingredients, prepare and eat the meal;
  sorting       Sorting: put the objects into the box in increasing order of quantity.
(the simulator's other games, 'twc', 'arithmetic', 'simonsays', 'peckingorder', are accepted too).

Task ids: '<game>/<seed>', e.g. 'coin/3' or 'cookingworld/20017'. The simulator defines the splits by
seed (TWX 1.1.0: train 0..999, dev 10000..10999, test 20000..20999; `seeds(game, split)` asks it), and
the split of a task id is the one whose seed list holds the seed. Aliases 'coin_collector',
'map_reader', 'cooking_world' / 'cooking' are accepted before the slash. The game's generation
parameters (number of rooms, doors, distractors...) come from `game_params`, e.g.
{'coin': 'numLocations=5,includeDoors=0,numDistractorItems=0'}; a game not named there uses TWX's
defaults. The reset seed argument is recorded but unused: a TWX game is fixed by its seed.

Tool:
  action {action: str}   one command, preferably one of the admissible actions ("move north",
                         "open door to south", "take coin"); the observation is the simulator's answer.
Reset observation: the task description, a blank line, then the first room description.
Step info (JSON): task_id, game, fold, score (the simulator's, 1.0 when solved; cooking and sorting
give partial credit and may go negative on failure), reward = clip(score, 0, 1) (outcome reward in
[0, 1]), step_reward = score change of this step, won (task success), lost (task failure), moves,
admissible_actions (sorted: the actions valid in the new state), valid (the action was admissible
before the step), location (the room the agent is in: 'You are in the X.' of the latest observation that
names one; the window's summary line, common.windowed, lists the places visited from it). Status 'invalid' when the action was not admissible (the simulator still answers it
and counts the move, as in TWX), else 'ok'. Done on success, failure, or after `env_step_limit` moves.

Query methods (EnvClient.query): game_names(), seeds(game, split), task_ids(split, games, limit),
gold_actions(task_id), admissible_actions(), episode_info() -> {'instruction': task description,
'observation': the current observation, 'admissible_actions': [...], 'location': the current room} (the windowed rollout mode,
common.windowed, reads it after each reset), task_type(task_id) -> the game.

Step latency (in this process, coin collector, 2-core CPU box): about 0.3-1 ms; through the
sandboxed process add the MCP round trip (a few ms). benchmarks/ and tests/twx_env_test.py measure it.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

from common.envs import base
from common.envs.base import StepResult

SPLITS = ("train", "dev", "test")
GAMES = ("coin", "mapreader", "cookingworld", "sorting")
ALIASES = {"coin_collector": "coin", "coincollector": "coin", "map_reader": "mapreader",
           "cooking_world": "cookingworld", "cooking": "cookingworld"}


_ROOM = re.compile(r"You are in the ([^.]+)\.")


def location(observation: str) -> str | None:
  """The room an observation places the agent in ('You are in the kitchen.' -> 'kitchen'), or None."""
  m = _ROOM.search(observation)
  return m.group(1).strip() if m else None


OPPOSITE = {   # the move that undoes a move (cancel_backtracks; planpo.data move detours)
  "north": "south", "south": "north", "east": "west", "west": "east"}


def cancel_backtracks(actions: list[str]) -> list[str]:
  """`actions` with every 'move D' directly followed by 'move <opposite D>' removed, repeatedly (a stack):
  ['move west', 'move north', 'move south', 'move east', 'take coin'] -> ['take coin']."""
  out: list[str] = []
  for a in actions:
    parts = a.split()
    if (out and len(parts) == 2 and parts[0] == "move" and parts[1] in OPPOSITE
        and out[-1] == f"move {OPPOSITE[parts[1]]}"):
      out.pop()
    else:
      out.append(a)
  return out


def _json(text: str) -> dict:
  try:
    import orjson  # pylint: disable=g-import-not-at-top  (TWX's own faster parser, installed with it)
    return orjson.loads(text)
  except ImportError:
    import json  # pylint: disable=g-import-not-at-top
    return json.loads(text)


class TwxToolEnv:
  """See the module docstring.

  Args:
    game_params: {game: TWX parameter string} ('' or absent: the simulator's defaults).
    env_step_limit: moves before the episode ends (done, not won).
    jvm_heap_mb: Java heap cap (-Xmx) so that the JVM stays inside the sandbox's memory limit.
  Raises:
    ValueError: a game_params key that is not a TWX game.
  """

  QUERY_METHODS = ("game_names", "seeds", "task_ids", "gold_actions", "admissible_actions", "episode_info",
                   "task_type")

  def __init__(self, *, game_params: dict[str, str] | None = None, env_step_limit: int = 100,
               jvm_heap_mb: int = 512):
    os.environ["JAVA_TOOL_OPTIONS"] = (os.environ.get("JAVA_TOOL_OPTIONS", "")
                                       + f" -Xmx{int(jvm_heap_mb)}m -XX:+UseSerialGC").strip()
    from textworld_express import TextWorldExpressEnv  # pylint: disable=g-import-not-at-top
    self._kwargs = {"game_params": dict(game_params or {}), "env_step_limit": env_step_limit,
                    "jvm_heap_mb": jvm_heap_mb}
    self._tw = TextWorldExpressEnv(envStepLimit=env_step_limit)
    self._server = self._tw.server
    self._names = [str(n) for n in self._tw.getGameNames()]
    self.env_step_limit = int(env_step_limit)
    self.game_params = {self._game(k): str(v) for k, v in (game_params or {}).items()}
    self._loaded: str | None = None
    self._seeds: dict[str, dict[str, list[int]]] = {}
    self._task_id: str | None = None
    self._fold = ""
    self._task_desc = ""
    self._obs = ""
    self._valid: list[str] = []
    self._score = 0.0
    self._moves = 0
    self._done = True
    self._location = ""

  # --- ToolEnv surface ---------------------------------------------------------------------

  def tools(self) -> list[dict[str, Any]]:
    return [base.action_tool("Perform one action in the text game, e.g. 'move north', 'open door to south', "
                             "'take coin', 'look around'. The admissible actions are listed with each observation.")]

  def reset(self, task_id: str, seed: int = 0) -> str:
    del seed  # the game is fixed by the seed in the task id
    game, game_seed, fold = self._parse(task_id)
    self._start(game, game_seed, fold, gold=False)
    self._task_id = f"{game}/{game_seed}"
    return f"{self._task_desc}\n\n{self._obs}"

  def step(self, call) -> StepResult:
    if self._task_id is None:
      raise RuntimeError("step() before reset(task_id, seed)")
    action, error = base.read_action(call, example="look around")
    if error:
      return StepResult(error, "invalid", False, self._info(0.0, False))
    if self._done:
      raise RuntimeError(f"episode of {self._task_id} is over; call reset()")
    action = " ".join(action.split())
    valid = action in self._valid
    r = _json(self._server.stepJSON(action))
    self._moves += 1
    score = float(r["score"])
    delta, self._score = score - self._score, score
    self._obs = str(r["observation"])
    self._location = location(self._obs) or self._location
    self._valid = sorted(str(a) for a in r["validActions"])
    won, lost = bool(r["tasksuccess"]), bool(r["taskfailure"])
    self._done = won or lost or score >= 1.0 or self._moves >= self.env_step_limit
    info = self._info(delta, valid)
    info.update(won=won or score >= 1.0, lost=lost)
    return StepResult(self._obs, "ok" if valid else "invalid", self._done, info)

  def close(self) -> None:
    logging.getLogger("py4j").setLevel(logging.CRITICAL)   # py4j logs a traceback when its gateway is gone
    try:
      self._tw.close()
    except Exception:  # pylint: disable=broad-except
      pass

  def clone(self) -> "TwxToolEnv":
    """An independent episode state (its own JVM): lets the env server run several slots."""
    return TwxToolEnv(**self._kwargs)

  # --- queries -----------------------------------------------------------------------------

  def game_names(self) -> list[str]:
    return list(self._names)

  def seeds(self, game: str, split: str = "train") -> list[int]:
    """The simulator's own seed list of `split` ('train', 'dev' or 'test') for `game`."""
    if split not in SPLITS:
      raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return list(self._split_seeds(self._game(game))[split])

  def task_ids(self, split: str = "train", games: list[str] | None = None, limit: int | None = None) -> list[str]:
    """'<game>/<seed>' for the first `limit` seeds (None: all) of `split`, per game (default GAMES)."""
    out = []
    for g in (games or GAMES):
      seeds = self.seeds(g, split)
      out += [f"{self._game(g)}/{s}" for s in (seeds if limit is None else seeds[:int(limit)])]
    return out

  def gold_actions(self, task_id: str) -> list[str]:
    """The simulator's gold action sequence without its back-and-forth moves (ends the current episode;
    call reset after).

    TWX 1.1.0 draws a coin collector's gold path from an unseeded random walk with backtracking: two
    calls on the same task return different sequences, some 3x longer than needed. Every 'move D'
    directly followed by 'move <opposite of D>' is cancelled (repeatedly, as a stack), which leaves the
    walk's simple path: one path per task on the tree-shaped maps of coin collector, so SFT data and
    the tokenizer trained on it are the same in every process. The reduced plan is replayed in the
    simulator and kept only if it wins; otherwise the raw sequence is returned.
    """
    game, game_seed, fold = self._parse(task_id)
    self._start(game, game_seed, fold, gold=True)
    raw = [str(a) for a in self._server.getGoldActionSequence()]
    plan = cancel_backtracks(raw)
    if plan != raw and not self._wins(game, game_seed, fold, plan):
      plan = raw
    self._task_id = None
    return plan

  def _wins(self, game: str, seed: int, fold: str, actions: list[str]) -> bool:
    self._start(game, seed, fold, gold=False)
    for a in actions:
      r = _json(self._server.stepJSON(a))
      if bool(r["tasksuccess"]) or float(r["score"]) >= 1.0:
        return True
    return False

  def admissible_actions(self) -> list[str]:
    return list(self._valid)

  def task_type(self, task_id: str) -> str:
    """The task's game ('coin', 'mapreader', 'cookingworld', 'sorting', ...): the per-type tables' label."""
    return self._game(base.split_task_id(task_id, env="TextWorldExpress", form="'coin/3' (<game>/<seed>)",
                                         number="seed")[0])

  def episode_info(self) -> dict[str, Any]:
    return {"instruction": self._task_desc, "observation": self._obs,
            "admissible_actions": list(self._valid), "location": self._location}

  # --- internals ---------------------------------------------------------------------------

  def _info(self, delta: float, valid: bool) -> dict[str, Any]:
    return {"task_id": self._task_id, "game": self._loaded, "fold": self._fold, "score": self._score,
            "reward": min(max(self._score, 0.0), 1.0), "step_reward": delta, "won": False, "lost": False,
            "moves": self._moves, "admissible_actions": list(self._valid), "valid": valid,
            "location": self._location}

  def _game(self, game: str) -> str:
    g = ALIASES.get(str(game).strip().lower(), str(game).strip().lower())
    if g not in self._names:
      raise ValueError(f"unknown TextWorldExpress game {game!r}; games are {self._names}")
    return g

  def _load(self, game: str) -> None:
    if self._loaded != game:
      msg = self._server.load(game, self.game_params.get(game, ""))
      if msg:
        raise ValueError(f"TextWorldExpress cannot load {game!r} with parameters "
                         f"{self.game_params.get(game, '')!r}: {msg}")
      self._loaded = game

  def _split_seeds(self, game: str) -> dict[str, list[int]]:
    if game not in self._seeds:
      self._load(game)
      self._seeds[game] = {"train": [int(s) for s in self._server.getSeedsTrain()],
                           "dev": [int(s) for s in self._server.getSeedsDev()],
                           "test": [int(s) for s in self._server.getSeedsTest()]}
    return self._seeds[game]

  def _parse(self, task_id: str) -> tuple[str, int, str]:
    g, seed = base.split_task_id(task_id, env="TextWorldExpress", form="'coin/3' (<game>/<seed>)", number="seed")
    game = self._game(g)
    for fold, seeds in self._split_seeds(game).items():
      if seed in seeds:
        return game, seed, fold
    sp = self._seeds[game]
    raise ValueError(f"seed {seed} of {task_id!r} is in no split of {game!r} (train "
                     f"{sp['train'][0]}..{sp['train'][-1]}, dev {sp['dev'][0]}..{sp['dev'][-1]}, "
                     f"test {sp['test'][0]}..{sp['test'][-1]})")

  def _start(self, game: str, seed: int, fold: str, *, gold: bool) -> None:
    self._load(game)
    r = _json(self._server.generateNewGameJSON(seed, fold, gold))
    self._fold = fold
    self._task_desc = str(self._server.getTaskDescription()).strip()
    self._obs = str(r["observation"])
    self._location = location(self._obs) or ""
    self._valid = sorted(str(a) for a in r["validActions"])
    self._score, self._moves, self._done = 0.0, 0, False

"""Household tasks with ALFWorld's own rules, as a tool environment (ToolEnv surface).

Task ids: '<split>/<index>', split in ('train', 'valid_seen', 'valid_unseen'), e.g. 'train/0' or
'valid_unseen/12'. The same ids name generated games (default) and the official ALFWorld games:

  generated  (games_dir None and $ALFWORLD_GAMES unset): game <index> of the split is generated offline from
             the ALFRED floor plans (generate.py; task types cycle through the six, rooms by `seed`), solved
             by ALFWorld's hand-coded expert (engine.solve) and written to `cache_dir` in ALFWorld's layout
             (<split>/<task>-<obj>-None-<recep>-<room>/trial_S<seed>/{game.tw-pddl,traj_data.json}).
             A game the expert cannot solve is redrawn with the next seed (alfworld-generate drops it).
  official   (games_dir=DIR or $ALFWORLD_GAMES=DIR): DIR is ALFWorld's json_2.1.1 folder (the one
             `alfworld-download` fetches: train/, valid_seen/, valid_unseen/ of trial folders with
             traj_data.json + game.tw-pddl) or the ALFWORLD_DATA folder holding it. Games are collected as
             AlfredTWEnv.collect_game_files does (skip 'movable'/'Sliced', unsolvable and missing games),
             sorted by path; <index> indexes that list. In a sandbox, add DIR to EnvSpec.ro_paths.

Tools:
  action {action: str}   one ALFWorld command ('go to countertop 1', 'take apple 1 from countertop 1',
                         'heat apple 1 with microwave 1', 'look', 'inventory', 'examine drawer 2', ...).
reset() returns ALFWorld's first observation (welcome line, the room's receptacles, 'Your task is to: ...').
A step's observation is the engine's feedback verbatim ('Nothing happens.' for a command that is not
admissible; status 'invalid' then). Step info: won (bool), score = reward = 1.0 if won else 0.0 (ALFWorld's
reward), admissible_actions (sorted list), task_type, task_id, split, moves, lost (False: the engine never
loses), admissible (was the command admissible). Done when won or after `max_steps` actions (published
household turn limit: 50).

Query methods (EnvClient.query): task_ids(split, n), gold_actions(task_id), task_info(task_id),
admissible_actions(). The reset seed is recorded but unused: a game is deterministic.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from common.envs import base
from common.envs.base import StepResult
from common.envs.household import engine, generate

GENERATED_SIZES = {"train": 3553, "valid_seen": 140, "valid_unseen": 134}   # ALFWorld's split sizes
_OFFICIAL_SPLITS = {"train": "train", "valid_seen": "valid_seen", "valid_unseen": "valid_unseen"}


class HouseholdToolEnv:
  """See the module docstring.

  Args:
    games_dir: official ALFWorld games folder (json_2.1.1 or its parent); default $ALFWORLD_GAMES or None
      (generate offline).
    cache_dir: where generated games are written (default: a fresh temporary folder).
    seed: generation seed: which room each generated game uses and its layout.
    unseen_per_type: None: ALFRED's held-out rooms (10, 219, 308, 424); k: k rooms per room type drawn with
      split_seed.
    split_seed: seed of the held-out room draw when unseen_per_type is set.
    max_steps: actions per episode before done.
    expert_max_steps: the hand-coded expert's step budget when solving a generated game (ALFWorld: 150).
  """

  QUERY_METHODS = ("task_ids", "gold_actions", "task_info", "admissible_actions")

  def __init__(self, *, games_dir: str | None = None, cache_dir: str | None = None, seed: int = 0,
               unseen_per_type: int | None = None, split_seed: int = 0, max_steps: int = 50,
               expert_max_steps: int = 150):
    self.games_dir = games_dir or os.environ.get("ALFWORLD_GAMES") or None
    self.cache_dir = cache_dir or tempfile.mkdtemp(prefix="household_")
    self.seed = int(seed)
    self.unseen_per_type = unseen_per_type
    self.split_seed = int(split_seed)
    self.max_steps = int(max_steps)
    self.expert_max_steps = int(expert_max_steps)
    self._official: dict[str, list[str]] = {}
    self._files: dict[str, str] = {}
    self._game: engine.Game | None = None
    self._game_file: str | None = None
    self._task_id: str | None = None
    self._infos: dict[str, Any] = {}
    self._meta: dict[str, Any] = {}
    self._moves = 0
    self._done = True

  # --- ToolEnv surface ---------------------------------------------------------------------

  def tools(self) -> list[dict[str, Any]]:
    return [base.action_tool("Perform one household action, e.g. 'go to countertop 1', 'open fridge 1', "
                             "'take apple 1 from countertop 1', 'move apple 1 to fridge 1', 'heat apple 1 with "
                             "microwave 1', 'clean apple 1 with sinkbasin 1', 'cool apple 1 with fridge 1', "
                             "'use desklamp 1', 'examine drawer 1', 'inventory', 'look'.")]

  def reset(self, task_id: str, seed: int = 0) -> str:
    path = self.game_file(task_id)
    if self._game is None or self._game_file != path:
      if self._game is not None:
        self._game.close()
      self._game = engine.Game(path)
      self._game_file = path
      with open(os.path.join(os.path.dirname(path), "traj_data.json")) as f:
        self._meta = json.load(f)
    obs, self._infos = self._game.reset()
    self._task_id = str(task_id)
    self._moves = 0
    self._done = False
    return obs

  def step(self, call) -> StepResult:
    if self._task_id is None:
      raise RuntimeError("step() before reset(task_id, seed)")
    action, error = base.read_action(call, example="look")
    if error:
      return StepResult(error, "invalid", False, self._info(None))
    if self._done:
      raise RuntimeError(f"episode of {self._task_id} is over; call reset()")
    action = action.strip()
    admissible = action in self._infos["admissible_commands"]
    obs, won, self._infos = self._game.step(action)
    self._moves += 1
    self._done = won or self._moves >= self.max_steps
    return StepResult(obs, "ok" if admissible else "invalid", self._done, self._info(admissible))

  def close(self) -> None:
    if self._game is not None:
      self._game.close()
      self._game = None

  # --- queries -----------------------------------------------------------------------------

  def task_ids(self, split: str = "train", n: int | None = None) -> list[str]:
    """The first n task ids of a split (all of it by default)."""
    size = len(self._official_files(split)) if self.games_dir else GENERATED_SIZES[self._split(split)]
    return [f"{split}/{i}" for i in range(size if n is None else min(int(n), size))]

  def gold_actions(self, task_id: str) -> list[str]:
    """The game's walkthrough: the hand-coded expert's plan (or the official file's stored walkthrough)."""
    path = self.game_file(task_id)
    with open(path) as f:
      walk = json.load(f).get("walkthrough")
    if walk is None:
      walk = engine.solve(path, max_steps=self.expert_max_steps)
    return list(walk or [])

  def task_info(self, task_id: str) -> dict[str, Any]:
    """traj_data fields of the game: task_type, pddl_params, scene (room), and the game file path."""
    path = self.game_file(task_id)
    with open(os.path.join(os.path.dirname(path), "traj_data.json")) as f:
      data = json.load(f)
    return {"task_type": data["task_type"], "pddl_params": data["pddl_params"], "scene": data.get("scene", {}),
            "game_file": path}

  def admissible_actions(self) -> list[str]:
    return list(self._infos.get("admissible_commands", []))

  # --- internals ---------------------------------------------------------------------------

  def _info(self, admissible: bool | None) -> dict[str, Any]:
    won = bool(self._infos.get("won", False))
    info = {"task_id": self._task_id, "split": self._task_id.split("/")[0], "won": won, "lost": False,
            "score": 1.0 if won else 0.0, "reward": 1.0 if won else 0.0, "moves": self._moves,
            "task_type": self._meta.get("task_type"), "admissible_actions": self.admissible_actions()}
    if admissible is not None:
      info["admissible"] = admissible
    return info

  @staticmethod
  def _split(split: str) -> str:
    if split not in generate.SPLITS:
      raise ValueError(f"split must be one of {generate.SPLITS}, got {split!r}")
    return split

  def _parse(self, task_id: str) -> tuple[str, int]:
    split, _, idx = str(task_id).rpartition("/")
    self._split(split)
    try:
      return split, int(idx)
    except ValueError:
      raise ValueError(f"household task ids look like 'train/0' (<split>/<index>), got {task_id!r}") from None

  def game_file(self, task_id: str) -> str:
    """Path of the game.tw-pddl of a task (generating and solving it first for generated games)."""
    if task_id in self._files:
      return self._files[task_id]
    split, idx = self._parse(task_id)
    if self.games_dir:
      files = self._official_files(split)
      if not 0 <= idx < len(files):
        raise ValueError(f"split {split!r} has games 0..{len(files) - 1}, got {idx}")
      path = files[idx]
    else:
      if not 0 <= idx < GENERATED_SIZES[split]:
        raise ValueError(f"split {split!r} has games 0..{GENERATED_SIZES[split] - 1}, got {idx}")
      path = self._generate(split, idx)
    self._files[task_id] = path
    return path

  def _generate(self, split: str, idx: int) -> str:
    room, task_type, game_seed = generate.task_plan(split, idx, seed=self.seed,
                                                    unseen_per_type=self.unseen_per_type, split_seed=self.split_seed)
    rooms = [r for r in generate.split_rooms(split, unseen_per_type=self.unseen_per_type,
                                             split_seed=self.split_seed)]
    for attempt in range(64):
      if attempt:   # redraw: next seed, and every 8 tries another room of the split
        room = rooms[(rooms.index(room) + (attempt % 8 == 0)) % len(rooms)]
      task = generate.sample_task(room, task_type, game_seed + attempt)
      if task is None:
        continue
      folder = os.path.join(self.cache_dir, split, task["name"])
      path = os.path.join(folder, "game.tw-pddl")
      if os.path.exists(path):
        with open(path) as f:
          if json.load(f).get("solvable"):
            return path
          continue
      os.makedirs(folder, exist_ok=True)
      with open(os.path.join(folder, "traj_data.json"), "w") as f:
        json.dump(generate.traj_data(task), f)
      with open(path, "w") as f:
        json.dump(generate.game_data(task, None), f)
      walk = engine.solve(path, max_steps=self.expert_max_steps, seed=game_seed)
      with open(path, "w") as f:
        json.dump(generate.game_data(task, walk), f)
      if walk is not None:
        return path
    raise RuntimeError(f"could not generate a solvable {task_type} game for {split}/{idx}")

  def _official_files(self, split: str) -> list[str]:
    split = self._split(split)
    if split not in self._official:
      root = self.games_dir
      for sub in ("json_2.1.1", ""):
        if os.path.isdir(os.path.join(root, sub, _OFFICIAL_SPLITS[split])):
          root = os.path.join(root, sub, _OFFICIAL_SPLITS[split])
          break
      else:
        raise FileNotFoundError(f"no {split}/ folder under {self.games_dir} (nor under its json_2.1.1/)")
      files = []
      for folder, _, names in os.walk(root):
        if "traj_data.json" not in names or "game.tw-pddl" not in names:
          continue
        if "movable" in folder or "Sliced" in folder:
          continue
        path = os.path.join(folder, "game.tw-pddl")
        with open(path) as f:
          if not json.load(f).get("solvable"):
            continue
        with open(os.path.join(folder, "traj_data.json")) as f:
          if json.load(f)["task_type"] not in generate.TASK_TYPES:
            continue
        files.append(path)
      self._official[split] = sorted(files)
    return self._official[split]


def make_household_env(**kwargs) -> HouseholdToolEnv:
  """Factory for EnvSpec('common.envs.household.env:make_household_env', kwargs)."""
  return HouseholdToolEnv(**kwargs)

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

Task types: the six of generate.TASK_TYPES. A generated game's type is fixed by its index (TASK_TYPES[index % 6]),
so `task_ids(split, games=[...], limit=k)` and `task_type(id)` never generate anything; an official game's
type is its traj_data.json 'task_type'.

Game cache (generated games): `cache_dir`, default $AGENTIC_RL_CACHE/household_games/v1, else
~/.cache/agentic-rl-jax/household_games/v1 (the repo's cache convention, common.lm.checkpoints; never the
shared data folder). A game is written into a temporary sibling folder and renamed into place, so
environments in threads or processes sharing the cache never see half a game, and repeated runs reuse
it (generation is the expensive part: the expert solves every game, ~1-8 s each on one loaded core).
A cache folder that cannot be written (e.g. mounted read-only into a sandbox with EnvSpec.ro_paths) is
still read; games missing there are generated into a private temporary folder. Inside a sandbox without
such a mount, $HOME is the sandbox's private tmpfs: each worker process then generates its own games.

Tools:
  action {action: str}   one ALFWorld command ('go to countertop 1', 'take apple 1 from countertop 1',
                         'heat apple 1 with microwave 1', 'look', 'inventory', 'examine drawer 2', ...).
reset() returns ALFWorld's first observation verbatim: the welcome line, the room ('You are in the middle of
a room. Looking quickly around you, you see ...'), the goal ('Your task is to: ...'), separated by blank
lines. A step's observation is the engine's feedback verbatim ('Nothing happens.' for a command that is not
admissible; status 'invalid' then). Step info:
  won (bool); reward = score = 1.0 if won else 0.0 (ALFWorld's outcome reward, in [0, 1]);
  step_reward: 1.0 on the winning step, else 0.0 (0.0 for a malformed call);
  admissible_actions: ALFWorld's admissible commands verbatim (sorted; 'help' included: verl-agent's prompt
    leaves it out, but the hand-coded expert's plans use it);
  task_type, task_id, split, moves; lost (False: the engine never loses); admissible (was the command
    admissible to the engine; absent for a malformed call).
Done when won or after `max_steps` actions (published household turn limit: 50).

Query methods (EnvClient.query; QUERY_METHODS):
  task_ids(split, n=None, games=None, limit=None)  ids of a split: the first n (index order), or with games /
                                                   limit the first `limit` of each task type of `games`
                                                   (grouped by type, in the order of `games`).
  task_type(task_id)      the game's task type (one of generate.TASK_TYPES).
  gold_actions(task_id)   the expert's walkthrough (ends with the winning action).
  task_info(task_id)      traj_data fields and the game file path.
  admissible_actions()    the current state's admissible actions (as in step info).
  episode_info()          {'instruction': the 'Your task is to: ...' line, 'observation': the current
                          observation (after reset: the room paragraph, without welcome line and goal),
                          'admissible_actions': the current list}: what common.windowed shows.
The reset seed is recorded but unused: a game is deterministic.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from typing import Any, Sequence

from common.envs import base
from common.envs.base import StepResult
from common.envs.household import engine, generate

GENERATED_SIZES = {"train": 3553, "valid_seen": 140, "valid_unseen": 134}   # ALFWorld's split sizes
_OFFICIAL_SPLITS = {"train": "train", "valid_seen": "valid_seen", "valid_unseen": "valid_unseen"}
CACHE_VERSION = "v1"   # bump when generate.py's output for a (room, task type, seed) changes
TASK_PREFIX = "Your task is to: "
WELCOME = "-= Welcome to TextWorld, ALFRED! =-"
_GENERATE_LOCK = threading.Lock()   # one generation at a time per process (the expert is serialised anyway)


def default_cache_dir() -> str:
  """$AGENTIC_RL_CACHE/household_games/<CACHE_VERSION>, else ~/.cache/agentic-rl-jax/household_games/..."""
  root = os.environ.get("AGENTIC_RL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "agentic-rl-jax")
  return os.path.join(root, "household_games", CACHE_VERSION)


def split_reset_text(text: str) -> tuple[str, str]:
  """(instruction, observation) of ALFWorld's first observation.

  Args:
    text: reset() text: welcome line, room paragraph, 'Your task is to: ...', separated by blank lines.
  Returns:
    The 'Your task is to: ...' paragraph (or the whole text when there is none) and the other paragraphs
    without the welcome line, joined by blank lines (the whole text when nothing else is left).
  """
  parts = [p.strip() for p in text.split("\n\n") if p.strip()]
  task = [p for p in parts if p.startswith(TASK_PREFIX)]
  rest = [p for p in parts if not p.startswith(TASK_PREFIX) and p != WELCOME]
  return (task[-1] if task else text), ("\n\n".join(rest) if rest else text)


class HouseholdToolEnv:
  """See the module docstring.

  Args:
    games_dir: official ALFWorld games folder (json_2.1.1 or its parent); default $ALFWORLD_GAMES or None
      (generate offline).
    cache_dir: where generated games are read and written; '' / None: `default_cache_dir()`. Read-only is
      fine (missing games then go to a private temporary folder).
    seed: generation seed: which room each generated game uses and its layout.
    unseen_per_type: None: ALFRED's held-out rooms (10, 219, 308, 424); k: k rooms per room type drawn with
      split_seed.
    split_seed: seed of the held-out room draw when unseen_per_type is set.
    max_steps: actions per episode before done.
    expert_max_steps: the hand-coded expert's step budget when solving a generated game (ALFWorld: 150).
  """

  QUERY_METHODS = ("task_ids", "task_type", "gold_actions", "task_info", "admissible_actions", "episode_info")

  def __init__(self, *, games_dir: str | None = None, cache_dir: str | None = None, seed: int = 0,
               unseen_per_type: int | None = None, split_seed: int = 0, max_steps: int = 50,
               expert_max_steps: int = 150):
    self.games_dir = games_dir or os.environ.get("ALFWORLD_GAMES") or None
    self.cache_dir = cache_dir or default_cache_dir()
    self._private_dir: str | None = None   # where games go when cache_dir cannot be written
    self.seed = int(seed)
    self.unseen_per_type = unseen_per_type
    self.split_seed = int(split_seed)
    self.max_steps = int(max_steps)
    self.expert_max_steps = int(expert_max_steps)
    self._official: dict[str, list[str]] = {}
    self._official_types: dict[str, str] = {}
    self._files: dict[str, str] = {}
    self._game: engine.Game | None = None
    self._game_file: str | None = None
    self._task_id: str | None = None
    self._infos: dict[str, Any] = {}
    self._meta: dict[str, Any] = {}
    self._instruction = ""
    self._obs = ""
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
    self._instruction, self._obs = split_reset_text(obs)
    self._moves = 0
    self._done = False
    return obs

  def step(self, call) -> StepResult:
    if self._task_id is None:
      raise RuntimeError("step() before reset(task_id, seed)")
    action, error = base.read_action(call, example="look")
    if error:
      return StepResult(error, "invalid", False, self._info(None, 0.0))
    if self._done:
      raise RuntimeError(f"episode of {self._task_id} is over; call reset()")
    action = action.strip()
    admissible = action in self._infos["admissible_commands"]
    was_won = bool(self._infos.get("won", False))
    obs, won, self._infos = self._game.step(action)
    self._obs = obs
    self._moves += 1
    self._done = won or self._moves >= self.max_steps
    return StepResult(obs, "ok" if admissible else "invalid", self._done,
                      self._info(admissible, 1.0 if won and not was_won else 0.0))

  def close(self) -> None:
    if self._game is not None:
      self._game.close()
      self._game = None

  # --- queries -----------------------------------------------------------------------------

  def task_ids(self, split: str = "train", n: int | None = None, games: Sequence[str] | None = None,
               limit: int | None = None) -> list[str]:
    """Task ids of a split; nothing is generated.

    Args:
      split: 'train', 'valid_seen' or 'valid_unseen'.
      n: at most this many ids in all (after the games / limit selection).
      games: task types to keep (names of generate.TASK_TYPES; a str is one type); None: all six.
      limit: at most this many ids per task type: the lowest indices of that type.
    Returns:
      With games and limit None: the first n ids (all by default) in index order (types cycle). Else the
      selected ids grouped by task type, in the order of `games` (of TASK_TYPES when None).
    Raises:
      ValueError: unknown split or task type.
    """
    split = self._split(split)
    if games is None and limit is None:
      size = len(self._official_files(split)) if self.games_dir else GENERATED_SIZES[split]
      return [f"{split}/{i}" for i in range(size if n is None else min(int(n), size))]
    types = [games] if isinstance(games, str) else list(games or generate.TASK_TYPES)
    bad = [t for t in types if t not in generate.TASK_TYPES]
    if bad:
      raise ValueError(f"unknown household task types {bad}; valid: {list(generate.TASK_TYPES)}")
    if self.games_dir:
      files = self._official_files(split)
      by_type = {t: [i for i, f in enumerate(files) if self._official_types[f] == t] for t in types}
    else:
      k, size = len(generate.TASK_TYPES), GENERATED_SIZES[split]
      by_type = {t: range(generate.TASK_TYPES.index(t), size, k) for t in types}
    out = []
    for t in dict.fromkeys(types):
      idx = list(by_type[t])
      out += [f"{split}/{i}" for i in (idx if limit is None else idx[:int(limit)])]
    return out if n is None else out[:int(n)]

  def task_type(self, task_id: str) -> str:
    """The task type of a task (generate.TASK_TYPES), without generating it. Raises ValueError on a bad id."""
    split, idx = self._parse(task_id)
    if self.games_dir:
      files = self._official_files(split)
      if not 0 <= idx < len(files):
        raise ValueError(f"split {split!r} has games 0..{len(files) - 1}, got {idx}")
      return self._official_types[files[idx]]
    if not 0 <= idx < GENERATED_SIZES[split]:
      raise ValueError(f"split {split!r} has games 0..{GENERATED_SIZES[split] - 1}, got {idx}")
    return generate.TASK_TYPES[idx % len(generate.TASK_TYPES)]

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
    """The current state's admissible commands (sorted; ALFWorld's list verbatim); [] before reset."""
    return list(self._infos.get("admissible_commands", []))

  def episode_info(self) -> dict[str, Any]:
    """{'instruction', 'observation', 'admissible_actions'} of the current episode (module docstring).

    Raises:
      RuntimeError: before the first reset.
    """
    if self._task_id is None:
      raise RuntimeError("episode_info() before reset(task_id, seed)")
    return {"instruction": self._instruction, "observation": self._obs,
            "admissible_actions": self.admissible_actions()}

  # --- internals ---------------------------------------------------------------------------

  def _info(self, admissible: bool | None, step_reward: float) -> dict[str, Any]:
    won = bool(self._infos.get("won", False))
    info = {"task_id": self._task_id, "split": self._task_id.split("/")[0], "won": won, "lost": False,
            "score": 1.0 if won else 0.0, "reward": 1.0 if won else 0.0, "step_reward": float(step_reward),
            "moves": self._moves, "task_type": self._meta.get("task_type"),
            "admissible_actions": self.admissible_actions()}
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
      with _GENERATE_LOCK:
        path = self._generate(split, idx)
    self._files[task_id] = path
    return path

  def _cached(self, split: str, name: str) -> str | None:
    """The cached game file of a task name ('' when cached as unsolvable), or None when not cached."""
    for root in (self.cache_dir, self._private_dir):
      if root is None:
        continue
      path = os.path.join(root, split, name, "game.tw-pddl")
      if os.path.exists(path):
        with open(path) as f:
          return path if json.load(f).get("solvable") else ""
    return None

  def _writable_root(self) -> str:
    """cache_dir when it can be written, else a private temporary folder (made once)."""
    if self._private_dir is None:
      try:
        os.makedirs(self.cache_dir, exist_ok=True)
        if os.access(self.cache_dir, os.W_OK):
          return self.cache_dir
      except OSError:
        pass
      self._private_dir = tempfile.mkdtemp(prefix="household_games_")
    return self._private_dir

  def _generate(self, split: str, idx: int) -> str:
    room, task_type, game_seed = generate.task_plan(split, idx, seed=self.seed,
                                                    unseen_per_type=self.unseen_per_type, split_seed=self.split_seed)
    hosts = generate.rooms_hosting(task_type)   # redraws move to the next room that can host the type
    rooms = [r for r in generate.split_rooms(split, unseen_per_type=self.unseen_per_type,
                                             split_seed=self.split_seed) if r in hosts]
    for attempt in range(64):
      if attempt:   # redraw: next seed, and every 8 tries another room of the split
        room = rooms[(rooms.index(room) + (attempt % 8 == 0)) % len(rooms)]
      task = generate.sample_task(room, task_type, game_seed + attempt)
      if task is None:
        continue
      cached = self._cached(split, task["name"])
      if cached is None:
        cached = self._write_game(split, task, game_seed)
      if cached:
        return cached
    raise RuntimeError(f"could not generate a solvable {task_type} game for {split}/{idx}")

  def _write_game(self, split: str, task: dict[str, Any], game_seed: int) -> str:
    """Writes and solves a sampled game in a temporary folder, then renames it into the cache.

    Returns the game file path, or '' when the expert cannot solve it (cached as unsolvable).
    """
    folder = os.path.join(self._writable_root(), split, task["name"])
    os.makedirs(os.path.dirname(folder), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=os.path.basename(folder) + ".tmp-", dir=os.path.dirname(folder))
    try:
      path = os.path.join(tmp, "game.tw-pddl")
      with open(os.path.join(tmp, "traj_data.json"), "w") as f:
        json.dump(generate.traj_data(task), f)
      with open(path, "w") as f:
        json.dump(generate.game_data(task, None), f)
      walk = engine.solve(path, max_steps=self.expert_max_steps, seed=game_seed)
      with open(path, "w") as f:
        json.dump(generate.game_data(task, walk), f)
      os.chmod(tmp, 0o755)
      try:
        os.rename(tmp, folder)
      except OSError:   # another worker placed the same game first (same content: deterministic)
        if not os.path.exists(os.path.join(folder, "game.tw-pddl")):
          raise
    finally:
      shutil.rmtree(tmp, ignore_errors=True)
    return os.path.join(folder, "game.tw-pddl") if walk is not None else ""

  def _official_files(self, split: str) -> list[str]:
    split = self._split(split)
    if split not in self._official:
      root = self.games_dir
      for sub in ("json_2.1.1", ""):
        if os.path.isdir(os.path.join(root, sub, _OFFICIAL_SPLITS[split])):
          root = os.path.join(root, sub, _OFFICIAL_SPLITS[split])
          break
      else:
        raise FileNotFoundError(
            f"no {_OFFICIAL_SPLITS[split]}/ folder under the official games folder {self.games_dir} (nor under its "
            f"json_2.1.1/): games_dir (--config.env.kwargs.games_dir or $ALFWORLD_GAMES) must be ALFWorld's "
            f"json_2.1.1 folder as alfworld-download writes it (train/, valid_seen/, valid_unseen/ of trial "
            f"folders with traj_data.json and game.tw-pddl) or the folder holding it; unset both to play games "
            f"generated offline")
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
          task_type = json.load(f)["task_type"]
        if task_type not in generate.TASK_TYPES:
          continue
        files.append(path)
        self._official_types[path] = task_type
      self._official[split] = sorted(files)
    return self._official[split]


def prepare_host(kwargs: dict, requests: Sequence[tuple[str, Sequence[str] | None, int | None]]
                 ) -> tuple[dict, tuple[str, ...]]:
  """Readies sandboxed household workers from the trainer's own (trusted) process.

  Inside a sandbox $HOME is a private tmpfs and the host's cache is not mounted, so every worker would
  generate and expert-solve its own copy of each game (~1-9 s a game). This generates every requested game
  once, here, into the cache, and hands the workers that folder read-only (planpo.rollouts.make_pool calls it
  as config `env.prepare` = 'common.envs.household.env:prepare_host').

  Args:
    kwargs: make_household_env keyword arguments (`env.kwargs`).
    requests: (split, task types or None, per-type limit or None) of every task_ids query the trainer makes.
  Returns:
    (kwargs with `cache_dir` and `games_dir` as absolute paths, the folders to mount read-only: the cache and
    the official games folder when one is used).
  Raises:
    ValueError: the cache folder cannot be written (the message names `env.kwargs.cache_dir`).
  """
  env = HouseholdToolEnv(**kwargs)
  try:
    for split, games, limit in requests:
      for t in env.task_ids(split, games=games, limit=limit):
        env.game_file(t)
    if env._private_dir is not None:
      raise ValueError(f"the household game cache {env.cache_dir} cannot be written; set "
                       "--config.env.kwargs.cache_dir to a writable folder (or $AGENTIC_RL_CACHE)")
  finally:
    env.close()
  out = dict(kwargs, cache_dir=os.path.abspath(env.cache_dir))
  ro = [out["cache_dir"]]
  if env.games_dir:
    out["games_dir"] = os.path.abspath(env.games_dir)
    ro.append(out["games_dir"])
  return out, tuple(ro)


def make_household_env(**kwargs) -> HouseholdToolEnv:
  """Factory for EnvSpec('common.envs.household.env:make_household_env', kwargs)."""
  return HouseholdToolEnv(**kwargs)

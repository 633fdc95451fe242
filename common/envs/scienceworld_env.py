"""ScienceWorld as a tool environment (ToolEnv surface), for serving from a sandboxed process.

ScienceWorld (Wang et al. 2022, "ScienceWorld: Is your Agent Smarter than a 5th Grader?",
arXiv:2203.07540; PyPI `scienceworld` 1.2.3, which bundles the Scala simulator as a jar run by a
Java runtime: Debian package `default-jre-headless`, i.e. OpenJDK 17 on bookworm) has 30 tasks, each
with numbered variations split into train/dev/test by the simulator itself.

Task ids: '<task name>/<variation>', e.g. 'boil/0' or 'find-animal/12' (a task number such as
'1-1' or the paper's name is accepted before the slash too). The dev and test variations of a task are
unseen variations of a seen task (other objects, start rooms, colours), not unseen tasks.

Reset observation: the task description ('Your task is to ...', without the simulator's 'Task
Description:' heading), a blank line, then the first room description ('look around').

Tools:
  action {action: str}   one simulator command ("open door to kitchen", "focus on red box",
                         "wait1"...); the observation is the simulator's answer. Status 'invalid' when
                         the simulator does not parse it ("No known action matches that input."), else
                         'ok'.
  valid_actions {}       the action strings valid now (a free action: no simulated time passes).
Step info: task_id, score (0-100, the simulator's), score_delta, reward = max(score, 0) / 100 (the
outcome reward in [0, 1]), step_reward = score_delta / 100, won (score reached 100), lost (score < 0:
the task failed), moves, completed; `valid` and `admissible_actions` (the valid-action list, twice) only
with include_valid_actions=True (it costs ~50-100 ms per step, ~10x a step without it, so it is off by
default). The valid-action list is not exhaustive: about one gold action in five is missing from it
(e.g. 'move egg dove egg in inventory to green box', or an 'open door' before the first step), so a
consumer that marks actions outside the list invalid (common.windowed with a listed state) would mark
those gold actions invalid.
Done when the simulator says the task is completed or failed (score < 0), or after
`env_step_limit` moves.

Query methods (EnvClient.query): task_names(), variations(task, split), task_ids(split, games, limit)
(`tasks` is accepted for `games`), task_type(task_id) (the task name), gold_actions(task_id),
admissible_actions() (= valid_actions(): the current state's list, ~50-100 ms), episode_info() ->
{'instruction': the task description, 'observation': the current room description,
'admissible_actions': valid_actions() or None without include_valid_actions} (read by the windowed
rollout mode, common.windowed, after each reset).

Gold action sequences (the simulator's, first 30 variations of each split): 3-16 actions for the four
find tasks (find-animal / find-living-thing / find-plant median 12, find-non-living-thing median 7),
2-9 for lifespan-*, 9-15 for power-component, 15-50 for most others, up to 180 for
inclined-plane-friction-unnamed-surfaces; simplifications='easy' does not shorten them much (the gold
generator still walks). Step latency in this process (2-core CPU box, loaded): ~8 ms median without the
valid-action list, ~75 ms with it; reset ~40 ms; gold_actions ~140 ms (the task is reloaded).

The seed is recorded but unused: a ScienceWorld variation is deterministic.
"""

from __future__ import annotations

import os
from typing import Any

from common.envs import base
from common.envs.base import StepResult

SPLITS = ("train", "dev", "test")


class ScienceWorldToolEnv:
  """See the module docstring.

  Args:
    simplifications: ScienceWorld simplification string ('' for none, 'easy' for all, or a comma
      list such as 'openDoors,selfWateringFlowerPots').
    env_step_limit: moves before the episode ends.
    include_valid_actions: add the valid-action list to every step's info.
    jvm_heap_mb: Java heap cap (-Xmx) so that the JVM stays inside the sandbox's memory limit.
  """

  QUERY_METHODS = ("task_names", "variations", "task_ids", "task_type", "gold_actions", "admissible_actions",
                   "valid_actions", "episode_info")

  def __init__(self, *, simplifications: str = "", env_step_limit: int = 100,
               include_valid_actions: bool = False, jvm_heap_mb: int = 1024):
    os.environ["JAVA_TOOL_OPTIONS"] = (os.environ.get("JAVA_TOOL_OPTIONS", "")
                                       + f" -Xmx{int(jvm_heap_mb)}m -XX:+UseSerialGC").strip()
    from scienceworld import ScienceWorldEnv
    from scienceworld.utils import infer_task
    self._infer = infer_task
    self._sw = ScienceWorldEnv("", envStepLimit=env_step_limit)
    self._server = self._sw.server
    self.simplifications = simplifications
    self.env_step_limit = env_step_limit
    self.include_valid_actions = include_valid_actions
    self._names = list(self._server.getTaskNames())
    self._loaded: tuple[str, int, bool] | None = None   # (task, variation, with gold path)
    self._fresh = False
    self._task_id: str | None = None
    self._last_score = 0
    self._done = True
    self._splits: dict[str, dict[str, list[int]]] = {}

  # --- ToolEnv surface ---------------------------------------------------------------------

  def tools(self) -> list[dict[str, Any]]:
    return [
        base.action_tool("Perform one ScienceWorld action, e.g. 'look around', 'open door to kitchen', "
                         "'pick up thermometer', 'focus on substance in pot', 'wait1'. Call "
                         "valid_actions to see what is possible now."),
        {"name": "valid_actions",
         "description": "List the actions that are valid in the current state (takes no time).",
         "inputSchema": {"type": "object", "properties": {}}},
    ]

  def reset(self, task_id: str, seed: int = 0) -> str:
    task, var = self._parse(task_id)
    if self._loaded is not None and self._loaded[:2] == (task, var) and self._fresh:
      pass  # freshly loaded (e.g. by gold_actions): the world is at its start
    elif self._loaded is not None and self._loaded[:2] == (task, var):
      self._server.reset()
    else:
      self._load(task, var, gold=False)
    self._fresh = False
    self._task_id = f"{task}/{var}"
    self._last_score = 0
    self._done = False
    return f"{self._task_desc()}\n\n{str(self._server.freeActionLook()).strip()}"

  def step(self, call) -> StepResult:
    if self._task_id is None:
      raise RuntimeError("step() before reset(task_id, seed)")
    name = call.get("name") if isinstance(call, dict) else None
    info: dict[str, Any] = {"task_id": self._task_id, "score": self._last_score,
                            "reward": max(self._last_score, 0) / 100.0, "score_delta": 0,
                            "moves": int(self._server.getNumMoves()), "completed": False,
                            "step_reward": 0.0, "won": self._last_score >= 100,
                            "lost": self._last_score < 0}
    if name == "valid_actions":
      acts = self.valid_actions()
      return StepResult("\n".join(acts), "ok", False, info)
    action, error = base.read_action(call, example="look around", tools_note=(
        "the tools are 'action' {\"action\": <command>} and 'valid_actions' {}."))
    if error:
      return StepResult(error, "invalid", False, info)
    if self._done:
      raise RuntimeError(f"episode of {self._task_id} is over; call reset()")
    self._fresh = False
    obs = self._server.step(action.strip())
    score = int(round(100 * self._server.getScore()))
    completed = bool(self._server.getCompleted())
    moves = int(self._server.getNumMoves())
    done = completed or score < 0 or moves >= self.env_step_limit
    info.update(score=score, reward=max(score, 0) / 100.0, score_delta=score - self._last_score,
                moves=moves, completed=completed, step_reward=(score - self._last_score) / 100.0,
                won=score >= 100, lost=score < 0)
    if self.include_valid_actions:
      info["valid"] = info["admissible_actions"] = self.valid_actions()
    self._last_score = score
    self._done = done
    status = "invalid" if obs.startswith("No known action") else "ok"
    return StepResult(obs, status, done, info)

  def close(self) -> None:
    try:
      self._sw.close()
    except Exception:
      pass

  # --- queries -----------------------------------------------------------------------------

  def task_names(self) -> list[str]:
    return list(self._names)

  def variations(self, task: str, split: str = "train") -> list[int]:
    """The simulator's own variation split for `task` ('train', 'dev' or 'test')."""
    if split not in SPLITS:
      raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    name = self._name(task)
    if name not in self._splits:
      keep = self._loaded
      self._load(name, 0, gold=False)
      self._splits[name] = {"train": list(self._server.getVariationsTrain()),
                            "dev": list(self._server.getVariationsDev()),
                            "test": list(self._server.getVariationsTest())}
      if keep is not None and keep[:2] != (name, 0):
        self._loaded = None  # the current episode's world was replaced; next reset reloads
    return list(self._splits[name][split])

  def task_ids(self, split: str = "train", games: list[str] | None = None, limit: int | None = None,
               tasks: list[str] | None = None) -> list[str]:
    """'<task>/<variation>' for the first `limit` variations (None: all) of `split`, per task.

    Args:
      split: 'train', 'dev' or 'test' (the simulator's own variation split).
      games: task names (or numbers such as '1-1'); None or empty: all 30 tasks.
      limit: variations per task (the first ones of the split, in the simulator's order).
      tasks: the older name of `games` (give one of them, not both).
    Returns:
      Task ids, task by task in the order given.
    Raises:
      ValueError: both `games` and `tasks` given, an unknown task, an unknown split or limit < 0.
    """
    if games and tasks:
      raise ValueError("give `games` or `tasks` (the same thing), not both")
    if limit is not None and int(limit) < 0:
      raise ValueError(f"limit must be >= 0 or None, got {limit}")
    names = [self._name(t) for t in (games or tasks)] if (games or tasks) else self._names
    out = []
    for n in names:
      vs = self.variations(n, split)
      out += [f"{n}/{v}" for v in (vs if limit is None else vs[:int(limit)])]
    return out

  def task_type(self, task_id: str) -> str:
    """The task name of `task_id` (its label in per-task-type tables), e.g. 'find-animal/3' -> 'find-animal'."""
    return self._parse(task_id)[0]

  def gold_actions(self, task_id: str) -> list[str]:
    """The simulator's gold action sequence for the task (loads it afresh, with the gold path)."""
    task, var = self._parse(task_id)
    self._load(task, var, gold=True)
    self._fresh = True
    self._task_id = None
    return [str(a) for a in self._server.getGoldActionSequence()]

  def valid_actions(self) -> list[str]:
    """The simulator's valid action-object combinations of the current state (~50-100 ms; hundreds to
    thousands of strings). Not exhaustive: some accepted commands (often gold actions) are missing."""
    return [str(a) for a in self._server.getValidActionObjectCombinations()]

  def admissible_actions(self) -> list[str]:
    """`valid_actions()` under the name the trainers query (common.windowed, planpo/data.py)."""
    return self.valid_actions()

  def episode_info(self) -> dict[str, Any]:
    """Instruction, current observation and (with include_valid_actions) admissible actions."""
    return {"instruction": self._task_desc(),
            "observation": str(self._server.freeActionLook()).strip(),
            "admissible_actions": self.valid_actions() if self.include_valid_actions else None}

  # --- internals ---------------------------------------------------------------------------

  def _task_desc(self) -> str:
    """The task description without the simulator's 'Task Description:' heading."""
    desc = str(self._server.freeActionTaskDesc()).strip()
    head = "Task Description:"
    return desc[len(head):].strip() if desc.startswith(head) else desc

  def _name(self, task: str) -> str:
    name = self._infer(str(task))
    if name not in self._names:
      raise ValueError(f"unknown ScienceWorld task {task!r}; tasks are {self._names}")
    return name

  def _parse(self, task_id: str) -> tuple[str, int]:
    task, v = base.split_task_id(task_id, env="ScienceWorld", form="'boil/0' (<task>/<variation>)",
                                 number="variation")
    name = self._name(task)
    n = int(self._server.getTaskMaxVariations(name))
    if not 0 <= v < n:
      raise ValueError(f"task {name!r} has variations 0..{n - 1}, got {v}")
    return name, v

  def _load(self, task: str, var: int, *, gold: bool) -> None:
    self._server.load(task, var, self.simplifications, gold)
    self._loaded = (task, var, gold)
    self._fresh = True

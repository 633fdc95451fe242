"""Offline ALFWorld problem generator: ALFRED floor plans -> PDDL problems in ALFWorld's game-file format.

Source parts, all shipped in the `alfworld` 0.4.2 wheel (Shridhar et al. 2021, "ALFWorld: Aligning Text and
Embodied Environments for Interactive Learning", arXiv:2010.03768):
  alfworld/gen/layouts/FloorPlan<N>-objects.json    the object and receptacle types present in room N;
  alfworld/gen/layouts/FloorPlan<N>-openable.json   the room's receptacle instances (THOR object ids) with
                                                    the agent pose [x m, z m, rotation deg, horizon deg]
                                                    from which each is used;
  alfworld/gen/constants.py                         which receptacle type holds which object type
                                                    (VAL_RECEPTACLE_OBJECTS), the cleanable / heatable /
                                                    coolable / toggleable / sliceable classes, openable
                                                    classes, the room types each task type is valid in;
  alfworld/gen/goal_library.py                      the PDDL goal and the goal-text templates per task type;
  alfworld/data/alfred.pddl, alfred.twl2            the domain and the text grammar (used by engine.py).

A game is what ALFWorld's `alfworld-generate` writes per trajectory folder: `game.tw-pddl` (JSON with
pddl_domain, grammar with the goal text filled in, pddl_problem, solvable, walkthrough) next to a
`traj_data.json` (task_type, pddl_params, scene) that the hand-coded expert reads. ALFRED places the room's
objects by physics sampling in THOR; offline we place them by the same receptacle-compatibility table: each
pickable object type of the room gets 1-3 instances (constants.MAX_NUM_OF_OBJ_INSTANCES), each in a random
compatible receptacle instance; receptacle types the layout lists without an instance (StoveBurner,
CoffeeMachine, Toaster...) get instances at their own locations (4 stove burners, else 1). Lamps go into a
furniture receptacle (they are toggleable, not pickable). Objects start in a fridge cool (as ALFRED marks
them). The goal is never satisfied at the start: the target's instances avoid the goal receptacle type
(and the fridge for cooling tasks). Deterministic given (room, task type, seed).

Splits, as ALFWorld's (ALFRED's) by rooms: 'train' and 'valid_seen' draw from the seen rooms (different
game seeds), 'valid_unseen' from the held-out rooms: ALFRED's valid_unseen floor plans 10, 219, 308, 424 by
default, or `unseen_per_type` rooms of each room type drawn with `split_seed`.
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

TASK_TYPES = ("pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
              "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place")
ROOM_TYPES = {"Kitchen": range(1, 31), "LivingRoom": range(201, 231), "Bedroom": range(301, 331),
              "Bathroom": range(401, 431)}
ALFRED_UNSEEN_ROOMS = (10, 219, 308, 424)
SPLITS = ("train", "valid_seen", "valid_unseen")
LAMP_HOLDERS = ("Desk", "SideTable", "Dresser", "DiningTable", "CoffeeTable", "Shelf", "TVStand", "CounterTop",
                "ArmChair", "Sofa", "Bed", "Ottoman", "Cart")
_SPLIT_SALT = {"train": 0, "valid_seen": 1_000_003, "valid_unseen": 2_000_029}


def _alfworld():
  """(constants, goal_library, package dir) of the installed alfworld (imports it lazily)."""
  os.environ.setdefault("ALFWORLD_DATA", os.path.join(os.environ.get("TMPDIR", "/tmp"), "alfworld_data"))
  import alfworld
  import alfworld.gen.constants as constants
  import alfworld.gen.goal_library as glib
  return constants, glib, os.path.dirname(alfworld.__file__)


def room_type(room: int) -> str:
  """ALFRED room type of a floor-plan number. Raises ValueError outside 1-30, 201-230, 301-330, 401-430."""
  for name, rng in ROOM_TYPES.items():
    if room in rng:
      return name
  raise ValueError(f"room {room} is not an ALFRED floor plan (1-30, 201-230, 301-330, 401-430)")


def split_rooms(split: str, *, unseen_per_type: int | None = None, split_seed: int = 0) -> list[int]:
  """Rooms of a split. unseen_per_type=None: ALFRED's held-out rooms; else that many per room type, seeded."""
  if split not in SPLITS:
    raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
  if unseen_per_type is None:
    unseen = set(ALFRED_UNSEEN_ROOMS)
  else:
    rng = random.Random(split_seed)
    unseen = {r for rooms in ROOM_TYPES.values() for r in rng.sample(list(rooms), int(unseen_per_type))}
  every = [r for rooms in ROOM_TYPES.values() for r in rooms]
  return sorted(unseen) if split == "valid_unseen" else [r for r in every if r not in unseen]


def _fix(s: str) -> str:
  """ALFRED's PDDL name escaping (PlannedGameState.fix_pddl_str_chars without its '#' templating)."""
  for a, b in (("-", "_minus_"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_"), (",", "_comma_")):
    s = s.replace(a, b)
  return s


def _rtype(thor_id: str) -> str:
  parts = thor_id.split("|")
  return parts[-1] if len(parts) > 4 else parts[0]


def _loc(pose) -> str:
  x, z, rot, hor = pose
  return "loc|%d|%d|%d|%d" % (round(x / 0.25), round(z / 0.25), round(rot / 90) % 4, round(hor))


class Scene:
  """One furnished room: receptacles (id -> (type, location)) and objects (id -> (type, receptacle id))."""

  def __init__(self, room: int, rng: random.Random, *, target: str | None = None, min_target: int = 1,
               avoid: tuple[str, ...] = ()):
    constants, _, pkg = _alfworld()
    base = os.path.join(pkg, "gen", "layouts", f"FloorPlan{room}")
    with open(base + "-objects.json") as f:
      types = set(json.load(f))
    with open(base + "-openable.json") as f:
      poses = json.load(f)
    static = set(constants.RECEPTACLES) - set(constants.MOVABLE_RECEPTACLES)
    self.room = room
    self.receptacles: dict[str, tuple[str, str]] = {}
    for rid in sorted(poses):
      if _rtype(rid) in static:
        self.receptacles[rid] = (_rtype(rid), _loc(poses[rid]))
    present = {t for t, _ in self.receptacles.values()}
    spots = [p for p in poses.values()]
    for t in sorted((types & static) - present - {"SinkBasin", "BathtubBasin"}):
      for k in range(4 if t == "StoveBurner" else 1):
        x, z, rot, hor = rng.choice(spots)
        pose = (x + 0.25 * (k + 1), z + 0.25 * rng.randint(-2, 2), rot, 30)
        self.receptacles[f"{t}|{pose[0]:+06.2f}|{0.9 + 0.01 * k:+06.2f}|{pose[1]:+06.2f}"] = (t, _loc(pose))
    self.rtypes = {t for t, _ in self.receptacles.values()}
    holders = {}
    for t in sorted(types | constants.MOVABLE_RECEPTACLES_SET & types):
      if t in static:
        continue
      holders[t] = sorted(r for r, (rt, _) in self.receptacles.items()
                          if t in constants.VAL_RECEPTACLE_OBJECTS.get(rt, ()))
    self.objects: dict[str, tuple[str, str]] = {}
    for t in sorted(holders):
      if not holders[t]:
        continue
      ok = [r for r in holders[t] if t != target or self.receptacles[r][0] not in avoid]
      n = rng.randint(1, constants.MAX_NUM_OF_OBJ_INSTANCES)
      if t == target:
        n = max(n, min_target)
      for _ in range(n if ok else 0):
        self._add(t, rng.choice(ok), rng)
    for lamp in ("DeskLamp", "FloorLamp"):
      if lamp in types:
        spots = sorted(r for r, (rt, _) in self.receptacles.items() if rt in LAMP_HOLDERS)
        if spots:
          self._add(lamp, rng.choice(spots), rng)

  def _add(self, t, rid, rng):
    parts = rid.split("|")
    x = float(parts[1]) + rng.uniform(-0.3, 0.3) if len(parts) > 1 else rng.uniform(-2, 2)
    z = float(parts[3]) + rng.uniform(-0.3, 0.3) if len(parts) > 3 else rng.uniform(-2, 2)
    oid = f"{t}|{x:+06.2f}|{rng.uniform(0.0, 1.8):+06.2f}|{z:+06.2f}"
    while oid in self.objects:
      oid = oid[:-1] + str(rng.randint(0, 9))
    self.objects[oid] = (t, rid)

  def count(self, t: str) -> int:
    return sum(1 for ot, _ in self.objects.values() if ot == t)


def _candidates(scene: Scene, task_type: str) -> list[tuple[str, str, str]]:
  """(object, parent receptacle, toggle) type triples feasible in the room for the task type."""
  constants, _, _ = _alfworld()
  acts = constants.VAL_ACTION_OBJECTS
  objs = sorted({t for t, _ in scene.objects.values() if t not in acts["Toggleable"]})
  need = {"pick_clean_then_place_in_recep": ("Cleanable", "SinkBasin"),
          "pick_heat_then_place_in_recep": ("Heatable", "Microwave"),
          "pick_cool_then_place_in_recep": ("Coolable", "Fridge")}
  if task_type == "look_at_obj_in_light":
    lamps = sorted({t for t, _ in scene.objects.values() if t in acts["Toggleable"]})
    return [(o, "", lamp) for o in objs for lamp in lamps]
  out = []
  for o in objs:
    if task_type in need:
      cls, tool = need[task_type]
      if o not in acts[cls] or tool not in scene.rtypes:
        continue
    for r in sorted(scene.rtypes):
      if o not in constants.VAL_RECEPTACLE_OBJECTS.get(r, ()):
        continue
      if task_type in need and r == need[task_type][1]:
        continue
      out.append((o, r, ""))
  return out


def sample_task(room: int, task_type: str, seed: int) -> dict[str, Any] | None:
  """A traj_data-like dict plus the PDDL problem for one game, or None when the room cannot host the type."""
  constants, glib, _ = _alfworld()
  if room_type(room) not in constants.GOALS_VALID[task_type]:
    return None
  rng = random.Random(f"{room}/{task_type}/{seed}")
  cands = _candidates(Scene(room, random.Random(rng.random())), task_type)
  if not cands:
    return None
  obj, parent, toggle = rng.choice(cands)
  avoid = (parent,) + (("Fridge",) if task_type == "pick_cool_then_place_in_recep" else ())
  scene = Scene(room, random.Random(rng.random()), target=obj,
                min_target=2 if task_type == "pick_two_obj_and_place" else 1, avoid=avoid)
  if scene.count(obj) < (2 if task_type == "pick_two_obj_and_place" else 1) or (toggle and not scene.count(toggle)):
    return None
  params = {"object_target": obj, "parent_target": parent, "toggle_target": toggle, "mrecep_target": "",
            "object_sliced": False}
  template = rng.choice(glib.gdict[task_type]["templates"])
  desc = template.format(obj=obj.lower(), recep=parent.lower(), toggle=toggle.lower(), mrecep="")
  name = f"{task_type}-{obj}-None-{parent or toggle}-{room}/trial_S{seed:08d}"
  goal = glib.gdict[task_type]["pddl"].format(obj=obj, recep=parent, toggle=toggle, mrecep="").replace("#", "-")
  return {"task_type": task_type, "pddl_params": params, "task_desc": desc, "name": name,
          "scene": {"floor_plan": f"FloorPlan{room}", "scene_num": room, "random_seed": seed},
          "pddl_problem": problem_pddl(scene, goal, name, rng)}


def problem_pddl(scene: Scene, goal: str, name: str, rng: random.Random) -> str:
  """The PDDL problem text in ALFRED's initial_state.pddl layout (escaped THOR ids, typed objects)."""
  constants, _, _ = _alfworld()
  acts = constants.VAL_ACTION_OBJECTS
  static = sorted(set(constants.RECEPTACLES) - set(constants.MOVABLE_RECEPTACLES))
  otypes = sorted(constants.OBJECTS_SET - set(static))
  start = "loc|%d|%d|%d|30" % (rng.randint(-20, 20), rng.randint(-20, 20), rng.randint(0, 3))
  locs = sorted({loc for _, loc in scene.receptacles.values()} | {start})
  decl = (["agent1 - agent"] + [f"{t}Type - otype" for t in otypes] + [f"{t}Type - rtype" for t in static]
          + [f"{_fix(o)} - object" for o in sorted(scene.objects)]
          + [f"{_fix(r)} - receptacle" for r in sorted(scene.receptacles)] + [f"{_fix(l)} - location" for l in locs])
  init = []
  for r, (rt, loc) in sorted(scene.receptacles.items()):
    init.append(f"(receptacleType {_fix(r)} {rt}Type)")
    init.append(f"(receptacleAtLocation {_fix(r)} {_fix(loc)})")
    if rt in constants.OPENABLE_CLASS_SET:
      init.append(f"(openable {_fix(r)})")
  for rt in sorted(scene.rtypes):
    init += [f"(canContain {rt}Type {ot}Type)" for ot in sorted(constants.VAL_RECEPTACLE_OBJECTS.get(rt, ()))
             if ot in constants.OBJECTS_SET]
  for o, (ot, r) in sorted(scene.objects.items()):
    fo = _fix(o)
    init += [f"(objectType {fo} {ot}Type)", f"(inReceptacle {fo} {_fix(r)})",
             f"(objectAtLocation {fo} {_fix(scene.receptacles[r][1])})"]
    if ot in acts["Toggleable"]:
      init.append(f"(toggleable {fo})")
    else:
      init.append(f"(pickupable {fo})")
    if ot in constants.MOVABLE_RECEPTACLES_SET:
      init.append(f"(isReceptacleObject {fo})")
    for cls, pred in (("Cleanable", "cleanable"), ("Heatable", "heatable"), ("Coolable", "coolable"),
                      ("Sliceable", "sliceable")):
      if ot in acts[cls]:
        init.append(f"({pred} {fo})")
    if scene.receptacles[r][0] == "Fridge" and ot in acts["Coolable"]:
      init.append(f"(isCool {fo})")
  init.append(f"(atLocation agent1 {_fix(start)})")
  body = "\n        ".join(init)
  objs = "\n        ".join(decl)
  return (f"\n(define (problem plan_{_fix(name.split('/')[-1])})\n(:domain alfred)\n(:objects\n        {objs}\n        )"
          f"\n\n(:init\n        {body}\n        )\n\n{goal}")


def game_data(task: dict[str, Any], walkthrough: list[str] | None) -> dict[str, Any]:
  """The game.tw-pddl JSON for a sampled task (grammar's 'UNKNOWN GOAL' replaced like add_task_to_grammar)."""
  _, _, pkg = _alfworld()
  with open(os.path.join(pkg, "data", "alfred.pddl")) as f:
    domain = f.read()
  with open(os.path.join(pkg, "data", "alfred.twl2")) as f:
    grammar = f.read()
  return {"pddl_domain": domain, "grammar": grammar.replace("UNKNOWN GOAL", task["task_desc"]),
          "pddl_problem": task["pddl_problem"], "solvable": walkthrough is not None, "walkthrough": walkthrough}


def traj_data(task: dict[str, Any]) -> dict[str, Any]:
  """The traj_data.json fields the hand-coded expert and the loaders read."""
  return {"task_type": task["task_type"], "pddl_params": task["pddl_params"], "scene": task["scene"],
          "task_id": task["name"], "turk_annotations": {"anns": [{"task_desc": task["task_desc"]}]}}


def rooms_hosting(task_type: str) -> set[int]:
  """The floor plans whose room type ALFWorld allows for `task_type` (constants.GOALS_VALID)."""
  constants, _, _ = _alfworld()
  return {r for rooms in ROOM_TYPES.values() for r in rooms if room_type(r) in constants.GOALS_VALID[task_type]}


def task_plan(split: str, index: int, *, seed: int = 0, unseen_per_type: int | None = None,
              split_seed: int = 0) -> tuple[int, str, int]:
  """(room, task type, game seed) of game `index` of a split: task types cycle, rooms are drawn by seed."""
  rooms = split_rooms(split, unseen_per_type=unseen_per_type, split_seed=split_seed)
  constants, _, _ = _alfworld()
  task_type = TASK_TYPES[index % len(TASK_TYPES)]
  ok = [r for r in rooms if room_type(r) in constants.GOALS_VALID[task_type]]
  if not ok:
    raise ValueError(f"no room of split {split!r} hosts {task_type}")
  rng = random.Random(f"{seed}/{split}/{index}")
  return rng.choice(ok), task_type, _SPLIT_SALT[split] + index * 7919 + seed

"""Household tasks with ALFWorld's own rules, generated offline (see env.py for the tool environment).

  generate.py  ALFRED floor plans -> ALFWorld game files (PDDL problem, grammar with the goal text, traj_data);
               the six task types; seen/unseen splits by held-out rooms.
  engine.py    playing a game file through TextWorld's PDDL engine with ALFWorld's wrappers; the hand-coded
               expert's walkthrough.
  env.py       HouseholdToolEnv (ToolEnv surface; factory 'common.envs.household.env:make_household_env').

Needs the packages that setup.sh installs without their declared dependencies: alfworld 0.4.2, textworld
1.7.0, fast-downward-textworld 20.6.4 and jericho 3.3.1 (both built from source: cmake, g++, make), tatsu
5.8.3, hashids, mementos, more-itertools, termcolor.
"""

"""ProgAgent's SFT data: teacher (or oracle) conversations as token trajectories in the rollouts' own format.

A conversation is OpenAI-format messages [system, user, assistant, tool..., assistant, ...] (assistant
messages carry native `tool_calls`; tool results are 'tool' messages; an error note between turns is a 'user'
message). It becomes a common.trajectory.Trajectory through the policy's common.chat.ChatTemplate exactly as
the rollout driver (common.rollout) builds a rollout:
  prompt_0   = chat.prompt_ids(messages before the first assistant message, tools)
  response_t = chat.assistant_ids(assistant message t)           (ends with the end-of-turn token)
  prompt_t   = chat.follow_up_ids(tool / user messages after response_{t-1}, after=response_{t-1})
so SFT teaches exactly the tokens the rollouts produce: `Trajectory.policy_mask` is True on the assistant
tokens only, and the SFT loss (common.lm.updates.sft_update) covers those only.

Source: ProgAgent (2026), "Training" (SPEC.md, ProgAgent): SFT cold start on teacher trajectories whose
criterion score is >= 0.7. The criterion score of an episode is its verifier reward R in {0, 1} (the source's
scorer is not published; our verifiers are binary), so score >= `sft.min_score` keeps exactly the successful
episodes. `sft.teacher_jsonl`: comma list of files written by `python -m progagent.teacher`; `sft.modes`
narrows them to some harness modes. Fallback when no file is given (the smoke config; no endpoint needed): the
tasks' oracle episodes (progagent.harness.run_oracle) under `sft.oracle_modes` at `sft.oracle_scales` on the
environment seeds `sft.oracle_seeds` stand in
for the teacher. Trajectories longer than `sft.max_tokens` tokens are left out (with a warning).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Sequence

from common import chat as chat_lib
from common import tool_wire
from common import trajectory as traj_lib
from progagent import harness
from progagent import ptc_env
from progagent.task_env import ProgTaskEnv

_log = logging.getLogger(__name__)


def messages_to_trajectory(messages: Sequence[dict], chat: chat_lib.ChatTemplate, *, tools: Sequence[dict],
                           task_id: str = "", reward: float = 0.0,
                           max_observation_chars: int | None = None) -> traj_lib.Trajectory:
  """An OpenAI-format conversation as a token trajectory (see the module docstring).

  Args:
    messages: [system?, user, ...] then assistant messages, each followed by its tool message(s) or one user
      message; a trailing observation after the last assistant message is kept as text only.
    chat: the policy's ChatTemplate.
    tools: the OpenAI function tools shown in the prompt (common.chat.tool_schemas of the env's MCP tools).
    task_id, reward: copied into the trajectory.
    max_observation_chars: the instruction and the tool results are cut to this many characters before
      rendering, as the rollout driver does (clip_observation; config `env.max_observation_chars`); tool
      messages are rendered with their role, name and content only, as the driver renders them; None = not cut.
  Returns:
    A Trajectory with termination 'done'.
  Raises:
    ValueError: no assistant message, or a message before the first assistant one that is not system/user;
      common.chat.ChatBoundaryError when the template does not split at an assistant turn's end.
  """
  first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), None)
  roles = [m["role"] for m in messages]
  if first is None or any(r not in ("system", "user") for r in roles[:first]):
    raise ValueError(f"a conversation must open with system/user messages and then have assistant messages; "
                     f"got roles {roles[:8]}")
  clip = ((lambda x: x) if max_observation_chars is None
          else (lambda x: clip_observation(x, max_observation_chars)))
  instruction = next((m["content"] for m in messages[:first] if m["role"] == "user"), "")
  t = traj_lib.Trajectory(0, task_id, 0, 0, 0, initial_observation=instruction, reward=float(reward))
  head = [m if m["role"] != "user" else {**m, "content": clip(str(m["content"]))} for m in messages[:first]]
  prompt = chat.prompt_ids(head, list(tools))
  i = first
  while i < len(messages):
    msg = messages[i]
    if msg["role"] != "assistant":
      raise ValueError(f"message {i}: expected an assistant message, got {msg['role']!r}")
    resp = chat.assistant_ids(msg)
    j = i + 1
    while j < len(messages) and messages[j]["role"] != "assistant":
      j += 1
    raw = [str(m.get("content") or "") for m in messages[i + 1:j]]
    obs_msgs = [{k: v for k, v in m.items() if k in ("role", "name")}
                | {"content": clip(text) if m["role"] == "tool" else text} for m, text in zip(messages[i + 1:j], raw)]
    t.turns.append(traj_lib.Turn(prompt_ids=prompt, response_ids=resp, response_text=chat.decode(resp),
                                 observation="\n\n".join(raw)))
    if j < len(messages):
      prompt = chat.follow_up_ids(obs_msgs, after=resp)
    i = j
  t.termination = "done"
  return t


def teacher_conversations(paths: Sequence[str], *, min_score: float, modes: Sequence[str] = ()) -> list[dict]:
  """Teacher records (progagent.teacher JSONL) whose criterion score (= verifier reward) is >= min_score.

  Returns:
    [{'task_id', 'mode', 'reward', 'messages', 'tools' (None when the record has none)}].
  Raises:
    FileNotFoundError naming a missing file.
  """
  from progagent import teacher  # pylint: disable=g-import-not-at-top
  out = []
  for p in paths:
    if not os.path.exists(p):
      raise FileNotFoundError(f"sft.teacher_jsonl: {p} does not exist; write it with `python -m progagent.teacher "
                              "... --out FILE`, or leave sft.teacher_jsonl empty to use the oracle fallback")
    for r in teacher.read_records(p):
      if float(r.get("reward", 0.0)) >= min_score and (not modes or r.get("mode") in modes):
        out.append({"task_id": r["task_id"], "mode": r.get("mode", "ptc"), "reward": float(r["reward"]),
                    "messages": r["messages"], "tools": r.get("tools")})
  return out


def oracle_conversations(task_ids: Sequence[str], *, modes: Sequence[str], scales: Sequence[int],
                         seeds: Sequence[int] = (0,), cache_dir: str | None = None) -> list[dict]:
  """The oracle's episodes (the offline stand-in for a teacher; see the module docstring) of every task, level
  in `scales`, environment seed in `seeds` and harness in `modes`; same fields as teacher_conversations plus
  'scale' and 'seed'."""
  out = []
  for tid in task_ids:
    for scale in scales:
      env = ProgTaskEnv(tid, scale, cache_dir=cache_dir)
      try:
        for seed in seeds:
          for mode in modes:
            ep = harness.run_oracle(env, mode, seed=seed)
            out.append({"task_id": tid, "mode": mode, "reward": ep.stats.reward, "messages": ep.messages,
                        "tools": getattr(ep, "tools", None), "scale": scale, "seed": seed})
      finally:
        env.close()
  return out


def mode_tools(task_id: str, mode: str) -> list[dict]:
  """The OpenAI function tools a rollout of `task_id` under harness `mode` shows (ProgEnv.tools())."""
  env = ProgTaskEnv(task_id, 0)
  try:
    return chat_lib.tool_schemas(ptc_env.ProgEnv(env, mode=mode, runtime="inprocess").tools())
  finally:
    env.close()


def clip_observation(text: str, limit: int) -> str:
  """An observation cut to `limit` characters the way the rollout driver cuts it (config
  `env.max_observation_chars`; common.rollout.RolloutDriver: common.tool_wire.truncate_output)."""
  return tool_wire.truncate_output(text, limit)


def sft_examples(config, chat: chat_lib.ChatTemplate, task_ids: Sequence[str], *,
                 cache_dir: str | None = None) -> list[traj_lib.Trajectory]:
  """The SFT trajectories: teacher records with score >= sft.min_score, or the oracle fallback (module doc)."""
  sc = config.sft
  if sc.teacher_jsonl:
    convs = teacher_conversations([p for p in sc.teacher_jsonl.split(",") if p], min_score=sc.min_score,
                                  modes=tuple(sc.modes))
  else:
    _log.warning("sft.teacher_jsonl is empty: SFT uses the tasks' oracle episodes as a stand-in teacher "
                 "(real teacher data: python -m progagent.teacher)")
    convs = [c for c in oracle_conversations(task_ids, modes=tuple(sc.oracle_modes), scales=tuple(sc.oracle_scales),
                                             seeds=tuple(sc.oracle_seeds), cache_dir=cache_dir)
             if c["reward"] >= sc.min_score]
  trajs = []
  for c in convs:
    tools = c["tools"] if c["tools"] is not None else mode_tools(c["task_id"], c["mode"])
    trajs.append(messages_to_trajectory(c["messages"], chat, tools=tools, task_id=c["task_id"], reward=c["reward"],
                                        max_observation_chars=config.env.max_observation_chars))
  kept = [t for t in trajs if len(t.token_ids()) <= sc.max_tokens]
  if len(kept) < len(trajs):
    _log.warning("SFT: %d of %d trajectories are longer than sft.max_tokens=%d tokens and are left out",
                 len(trajs) - len(kept), len(trajs), sc.max_tokens)
  return kept


def tokenizer_corpus(task_ids: Sequence[str], modes: Sequence[str], *, seed: int = 0) -> list[str]:
  """Texts a tiny tokenizer is trained on: the harness system prompts, the modes' tool schemas (JSON), the
  tasks' instructions and oracle programs (as source and as the JSON of their programmatic_tool_call), and the
  observations of each task's DTC oracle episode at v0 on environment seed `seed` (a training seed), so that
  tool results (JSON rows) tokenise as compactly as the prompts do."""
  from progagent import tasks as tasks_lib  # pylint: disable=g-import-not-at-top
  texts = [harness.system_prompt(m) for m in modes]
  for tid in task_ids:
    task = tasks_lib.get_task(tid)
    texts += [json.dumps(t) for m in modes for t in mode_tools(tid, m)] + [task.prompt] + list(task.ptc)
    texts += [json.dumps({"name": harness.PROGRAM_TOOL, "arguments": {"code": p}}) for p in task.ptc]
    env = ProgTaskEnv(tid, 0)
    try:
      ep = harness.run_oracle(env, "dtc", seed=seed)
    finally:
      env.close()
    texts += [m["content"] for m in ep.messages if m["role"] == "tool"]
  return list(dict.fromkeys(texts))

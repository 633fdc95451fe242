"""Chat-format benchmark: the driver's per-turn observation tokens vs re-rendering the whole conversation.

  python -m benchmarks.chat_bench            # 40-turn conversations
  python -m benchmarks.chat_bench --quick    # 10 turns

Each turn of a rollout appends a tool result to the context. `common.chat.ChatTemplate.observation_ids`
renders only the new tool message against a stub prefix (token-in/token-out: earlier turns are never
re-tokenised); the baseline, measured in the same run, is what a driver without it would do: render the
whole conversation so far with the tokenizer's chat template and tokenize it again. Both use the same tiny
Qwen3-style tokenizer with its tool-calling template (common.lm.testing). Reported: milliseconds per turn
and the ratio baseline / driver (above 1: the driver is faster), at each conversation length.
`run(quick=False) -> dict` returns everything printed.
"""

from __future__ import annotations

import json
import time

from benchmarks import _cli
from common import chat as chat_lib
from common.lm import testing

TOOLS = [{"name": "programmatic_tool_call", "description": "Run a Python program that calls tools.",
          "inputSchema": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}]


def _conversation(turns: int) -> list[dict]:
  msgs = [{"role": "system", "content": "You solve tasks with tools."},
          {"role": "user", "content": "Count the pending orders over 500."}]
  for t in range(turns):
    code = f"rows = tools['query'](sql='select * from orders limit {t}')\nprint(len(rows))"
    msgs.append({"role": "assistant", "content": "",
                 "tool_calls": [{"type": "function",
                                 "function": {"name": "programmatic_tool_call", "arguments": {"code": code}}}]})
    msgs.append({"role": "tool", "name": "programmatic_tool_call", "content": f"{t * 7}\n" + "x" * 200})
  return msgs


def _time(fn, repeats: int) -> float:
  best = float("inf")
  for _ in range(repeats):
    t0 = time.perf_counter()
    fn()
    best = min(best, time.perf_counter() - t0)
  return best


def run(quick: bool = False) -> dict:
  tok = testing.build_tokenizer("qwen3", chat_template=testing.QWEN3_TOOL_TEMPLATE)
  chat = chat_lib.ChatTemplate(tok)
  tools = chat_lib.tool_schemas(TOOLS)
  out = {}
  for turns in ((5, 10) if quick else (10, 20, 40)):
    msgs = _conversation(turns)
    after = chat.assistant_ids(msgs[-2])

    def driver():
      for t in range(turns):
        chat.observation_ids([msgs[3 + 2 * t]], after=after)

    def rerender():
      for t in range(turns):
        chat.prompt_ids(msgs[:4 + 2 * t], tools)

    repeats = 2 if quick else 3
    d, r = _time(driver, repeats) / turns, _time(rerender, repeats) / turns
    out[str(turns)] = {"driver_ms_per_turn": d * 1e3, "rerender_ms_per_turn": r * 1e3,
                       "ratio_rerender_over_driver": r / d}
    print(f"{turns:3d} turns: observation_ids {d * 1e3:7.2f} ms/turn | full re-render {r * 1e3:7.2f} ms/turn "
          f"| ratio x{r / d:.2f}")
  return out


if __name__ == "__main__":
  print(json.dumps(_cli.main(run, __doc__), indent=1))

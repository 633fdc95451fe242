"""Helpdesk domain: support tickets and agents; chat transcripts and the on-call note are workspace files."""

from __future__ import annotations

import random

from progagent.tasks import base as B
from progagent.tasks.base import Ctx, ToolError

PRIORITIES = ("low", "normal", "high", "urgent")
STATUSES = ("open", "pending", "resolved", "closed")
SUBJECTS = ("Cannot log in", "Invoice looks wrong", "App crashes on start", "Password reset email missing",
            "Wrong item delivered", "Cannot change address", "Slow page loads", "Charged twice",
            "Export to CSV fails", "Account locked")

SCHEMA = """
CREATE TABLE agents (id INTEGER PRIMARY KEY, name TEXT, team TEXT, on_duty INTEGER);
CREATE TABLE tickets (id INTEGER PRIMARY KEY, customer_email TEXT, subject TEXT, priority TEXT, status TEXT,
                      created TEXT, assignee_id INTEGER, body TEXT);
CREATE INDEX tickets_status ON tickets(status);
"""


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  names = B.unique_names(rng, 12)
  teams = ["tier1"] * 6 + ["tier2"] * 4 + ["billing"] * 2
  B.insert_rows(ctx, "agents", [{"id": i + 1, "name": nm, "team": teams[i], "on_duty": int(rng.random() < 0.6)}
                                for i, nm in enumerate(names)])
  customers = B.unique_names(rng, 130 * f)
  tickets = []
  for i in range(390 * f):
    c = rng.choice(customers)
    tickets.append({"id": 5001 + i, "customer_email": B.email_of(c, i), "subject": rng.choice(SUBJECTS),
                    "priority": rng.choices(PRIORITIES, (3, 5, 2, 1))[0],
                    "status": rng.choices(STATUSES, (3, 2, 3, 4))[0], "created": B.rand_date(rng),
                    "assignee_id": rng.randint(1, 12) if rng.random() < 0.6 else None,
                    "body": " ".join(B.sentence(rng, 9) for _ in range(2))})
  for k, assignee in enumerate((None, 3, None, 7)):   # open urgent tickets, assigned or not, at every scale
    tickets[k].update(priority="urgent", status="open", assignee_id=assignee)
  B.insert_rows(ctx, "tickets", tickets)
  B.write_docs(ctx, rng, "helpdesk", ["escalation", "sla", "macros", "tone_guide", "rota"])
  ctx.write("oncall.txt", f"On-call agent: {names[rng.randint(6, 9)]}\n")
  for j, t in enumerate(rng.sample(tickets, B.n_data_files(f))):
    word = ("Refund", "refund", None, "REFUND", None)[j % 5]
    lines = [f"customer: {B.sentence(rng, 8)}", f"agent: {B.sentence(rng, 10)}"]
    if word:
      lines.insert(rng.randint(0, 2), f"customer: I want a {word} for this. {B.sentence(rng, 5)}")
    ctx.write(f"transcripts/ticket_{t['id']}.txt", f"Ticket {t['id']}: {t['subject']}\n" + "\n".join(lines) + "\n")


def _get_ticket(ctx, ticket_id):
  r = ctx.q1("SELECT * FROM tickets WHERE id = ?", ticket_id)
  if r is None:
    raise ToolError(f"no ticket with id {ticket_id}")
  return r


def _list_tickets(ctx, status):
  if status not in STATUSES:
    raise ToolError(f"unknown status {status!r}; use one of {list(STATUSES)}")
  return ctx.q("SELECT id, subject, priority, status, created, assignee_id FROM tickets WHERE status = ? "
               "ORDER BY id", status)


def _assign(ctx, ticket_id, agent_id):
  _get_ticket(ctx, ticket_id)
  if ctx.q1("SELECT id FROM agents WHERE id = ?", agent_id) is None:
    raise ToolError(f"no agent with id {agent_id}; list_agents gives the ids")
  ctx.exec("UPDATE tickets SET assignee_id = ? WHERE id = ?", agent_id, ticket_id)
  return {"ticket_id": ticket_id, "assignee_id": agent_id}


def _set_status(ctx, ticket_id, status):
  if status not in STATUSES:
    raise ToolError(f"unknown status {status!r}; use one of {list(STATUSES)}")
  _get_ticket(ctx, ticket_id)
  ctx.exec("UPDATE tickets SET status = ? WHERE id = ?", status, ticket_id)
  return {"ticket_id": ticket_id, "status": status}


TOOLS = (
    B.tool("list_tickets", "List the tickets with a status: [{id, subject, priority, status, created, "
           "assignee_id}] (assignee_id null = unassigned).", _list_tickets, required=("status",),
           status=B.p_str("ticket status", STATUSES)),
    B.tool("get_ticket", "Get one ticket with its body.", _get_ticket, required=("ticket_id",),
           ticket_id=B.p_int("ticket id")),
    B.tool("list_agents", "List the support agents: [{id, name, team, on_duty}].",
           lambda ctx: ctx.q("SELECT * FROM agents ORDER BY id")),
    B.tool("assign_ticket", "Assign a ticket to an agent.", _assign, required=("ticket_id", "agent_id"),
           ticket_id=B.p_int("ticket id"), agent_id=B.p_int("agent id")),
    B.tool("set_ticket_status", "Set a ticket's status.", _set_status, required=("ticket_id", "status"),
           ticket_id=B.p_int("ticket id"), status=B.p_str("new status", STATUSES)),
    B.LIST_FILES, B.READ_FILE,
)

DOMAIN = B.Domain("helpdesk", "A support desk's tickets and agents.", SCHEMA, generate, TOOLS)

ONCALL = """\
name = tools["read_file"](path="oncall.txt")["content"].split(":", 1)[1].strip()
agent = next(a for a in tools["list_agents"]() if a["name"] == name)
done = []
for t in tools["list_tickets"](status="open"):
    if t["priority"] == "urgent" and t["assignee_id"] is None:
        tools["assign_ticket"](ticket_id=t["id"], agent_id=agent["id"])
        done.append(t["id"])
print(name, done)
tools["submit_answer"]()
"""

REFUND = """\
n = 0
for path in tools["list_files"](directory="transcripts"):
    if "refund" in tools["read_file"](path=path)["content"].lower():
        n += 1
print(n)
tools["submit_answer"](answer=n)
"""

CLOSE = """\
for t in tools["list_tickets"](status="resolved"):
    if t["created"] < "2024-05-01":
        tools["set_ticket_status"](ticket_id=t["id"], status="closed")
tools["submit_answer"]()
"""

BUSIEST = """\
from collections import Counter
c = Counter()
for st in ("open", "pending"):
    for t in tools["list_tickets"](status=st):
        if t["assignee_id"] is not None:
            c[t["assignee_id"]] += 1
best = min(c, key=lambda a: (-c[a], a))
name = next(a["name"] for a in tools["list_agents"]() if a["id"] == best)
print(name, c[best])
tools["submit_answer"](answer=name)
"""


def _tickets(ctx):
  return {r["id"]: (r["status"], r["assignee_id"]) for r in ctx.q("SELECT id, status, assignee_id FROM tickets")}


def _oncall_expected(ctx):
  name = ctx.read("oncall.txt").split(":", 1)[1].strip()
  agent = ctx.scalar("SELECT id FROM agents WHERE name = ?", name)
  want = _tickets(ctx)
  for r in ctx.q("SELECT id FROM tickets WHERE status = 'open' AND priority = 'urgent' AND assignee_id IS NULL"):
    want[r["id"]] = ("open", agent)
  return want


def _close_expected(ctx):
  want = _tickets(ctx)
  for r in ctx.q("SELECT id, assignee_id FROM tickets WHERE status = 'resolved' AND created < '2024-05-01'"):
    want[r["id"]] = ("closed", r["assignee_id"])
  return want


TASKS = [
    B.Task(DOMAIN, "assign_urgent_oncall",
           "Assign every open ticket of priority 'urgent' that has no assignee to the on-call agent named in "
           "oncall.txt. Change nothing else.", (ONCALL,), _oncall_expected,
           check=lambda ctx, e, a: _tickets(ctx) == e, wrong=(' and t["assignee_id"] is None', "")),
    B.Task(DOMAIN, "refund_transcripts",
           "How many of the transcripts in transcripts/ contain the word 'refund' (in any letter case)?",
           (REFUND,), lambda ctx: sum("refund" in ctx.read(p).lower() for p in ctx.files("transcripts")),
           answer="int", wrong=(".lower()", "")),
    B.Task(DOMAIN, "close_old_resolved",
           "Set the status of every 'resolved' ticket created before 2024-05-01 to 'closed'. Change nothing else.",
           (CLOSE,), _close_expected, check=lambda ctx, e, a: _tickets(ctx) == e,
           wrong=('if t["created"] < "2024-05-01":', "if True:")),
    B.Task(DOMAIN, "busiest_agent",
           "Which agent is assigned the most tickets whose status is 'open' or 'pending'? Submit the agent's "
           "name (on a tie, the agent with the smaller id).", (BUSIEST,),
           lambda ctx: ctx.scalar("SELECT a.name FROM tickets t JOIN agents a ON a.id = t.assignee_id WHERE "
                                  "t.status IN ('open', 'pending') GROUP BY a.id ORDER BY COUNT(*) DESC, a.id LIMIT 1"),
           answer="text", wrong=("best = min(c, key=lambda a: (-c[a], a))",
                                 "best = sorted(c, key=lambda a: (-c[a], a))[1]")),
]

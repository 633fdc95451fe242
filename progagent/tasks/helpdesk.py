"""Helpdesk domain: support tickets and agents; chat transcripts, the on-call note and a shift handover note are
workspace files; first-response times come from an SLA service that answers in free text and is sometimes busy."""

from __future__ import annotations

import collections
import random
import re

from progagent.tasks import base as B
from progagent.tasks import generators as G
from progagent.tasks.base import Ctx, ToolError

PRIORITIES = ("low", "normal", "high", "urgent")
STATUSES = ("open", "pending", "resolved", "closed")
TEAMS = ("tier1", "tier2", "billing")
SUBJECTS = ("Cannot log in", "Invoice looks wrong", "App crashes on start", "Password reset email missing",
            "Wrong item delivered", "Cannot change address", "Slow page loads", "Charged twice",
            "Export to CSV fails", "Account locked")
SLA_TARGET_H = {"low": 24, "normal": 8, "high": 4, "urgent": 1}   # first-response targets (hours)

SCHEMA = """
CREATE TABLE agents (id INTEGER PRIMARY KEY, name TEXT, team TEXT, on_duty INTEGER);
CREATE TABLE tickets (id INTEGER PRIMARY KEY, customer_email TEXT, subject TEXT, priority TEXT, status TEXT,
                      created TEXT, assignee_id INTEGER, body TEXT);
CREATE TABLE comments (id INTEGER PRIMARY KEY AUTOINCREMENT, ticket_id INTEGER, text TEXT);
CREATE TABLE sla (ticket_id INTEGER PRIMARY KEY, response_minutes INTEGER, busy INTEGER);
CREATE INDEX tickets_status ON tickets(status);
"""


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  names = G.unique_names(rng, 12)
  teams = ["tier1"] * 6 + ["tier2"] * 4 + ["billing"] * 2
  duty = [int(rng.random() < 0.6) for _ in names]
  for i in rng.sample(range(6, 10), 2):   # at least two tier2 agents on duty
    duty[i] = 1
  customers = G.unique_names(rng, 130 * f)
  tickets = []
  for i in range(390 * f):
    c = rng.choice(customers)
    tickets.append({"id": 5001 + i, "customer_email": G.email_of(c, i), "subject": rng.choice(SUBJECTS),
                    "priority": rng.choices(PRIORITIES, (3, 5, 2, 1))[0],
                    "status": rng.choices(STATUSES, (3, 2, 3, 4))[0], "created": G.rand_date(rng),
                    "assignee_id": rng.randint(1, 12) if rng.random() < 0.6 else None,
                    "body": G.sentence(rng, 12)})
  n_free, n_taken = rng.randint(2, 4), rng.randint(1, 3)   # open urgent tickets, unassigned or not
  for k, t in enumerate(rng.sample(tickets, n_free + n_taken)):
    t.update(priority="urgent", status="open", assignee_id=None if k < n_free else rng.randint(1, 12))
  sla = []
  for t in tickets:
    target = SLA_TARGET_H[t["priority"]] * 60
    sla.append({"ticket_id": t["id"], "response_minutes": rng.randint(max(5, target // 5), 2 * target),
                "busy": int(rng.random() < 0.3)})
  scope = [s for s, t in zip(sla, tickets) if t["status"] == "open" and t["priority"] in ("high", "urgent")]
  for s in rng.sample(scope, 2):   # at least one breach behind a busy service, one clean breach
    s["response_minutes"] = SLA_TARGET_H[tickets[s["ticket_id"] - 5001]["priority"]] * 60 + rng.randint(5, 50)
  scope_breach = [s for s in scope if s["response_minutes"] > SLA_TARGET_H[tickets[s["ticket_id"] - 5001]
                                                                            ["priority"]] * 60]
  rng.choice(scope_breach)["busy"] = 1
  G.write_docs(ctx, rng, "helpdesk", ["escalation", "sla", "macros", "tone_guide", "rota"])
  ctx.write("oncall.txt", f"On-call agent: {names[rng.randint(6, 9)]}\n")
  n_tr = B.n_data_files(f) - 1   # one data slot holds the handover note
  words = [rng.choice(("Refund", "REFUND"))] + [rng.choice(("Refund", "refund", "REFUND", None, None))
                                                for _ in range(n_tr - 1)]
  rng.shuffle(words)
  for t, word in zip(rng.sample(tickets, n_tr), words):
    lines = [f"customer: {G.sentence(rng, 8)}", f"agent: {G.sentence(rng, 10)}"]
    if word:
      lines.insert(rng.randint(0, 2), f"customer: I want a {word} for this. {G.sentence(rng, 5)}")
    ctx.write(f"transcripts/ticket_{t['id']}.txt", f"Ticket {t['id']}: {t['subject']}\n" + "\n".join(lines) + "\n")
  live = [t for t in tickets if t["status"] in ("open", "pending")]
  done = [t for t in tickets if t["status"] in ("resolved", "closed")]
  listed = rng.sample(live, rng.randint(2, 4)) + rng.sample(done, rng.randint(1, 2))
  rng.shuffle(listed)
  refs = [rng.choice((f"#{t['id']}", f"ticket {t['id']}", f"T-{t['id']}")) + f" - {G.sentence(rng, 5)}"
          for t in listed]
  ctx.write(f"shift_notes/{rng.choice(('early', 'late', 'night'))}/handover_06{rng.randint(10, 28)}.txt",
            f"Handover from {rng.choice(names)}\n\n{G.sentence(rng, 9)}\n\nPlease escalate:\n"
            + "".join(f"  * {r}\n" for r in refs) + f"\n{G.sentence(rng, 7)}\n")
  _plant_distractors(rng, teams, duty, tickets, sla, customers)
  G.insert_rows(ctx, "agents", [{"id": i + 1, "name": nm, "team": teams[i], "on_duty": duty[i]}
                                for i, nm in enumerate(names)])
  G.insert_rows(ctx, "tickets", tickets)
  G.insert_rows(ctx, "sla", sla)


def _plant_distractors(rng, teams, duty, tickets, sla, customers) -> None:
  """Data that makes each declared condition matter (base.Task.conditions; drawn after everything else, so the
  rest of the state is what it would be without them). escalate_handover: an on-duty tier1 agent and an
  off-duty tier2 agent hold no open ticket (their open tickets go to other tier1 / billing agents) while every
  on-duty tier2 agent holds one or more (without 'tier2' / 'on duty' another agent would be picked).
  busiest_agent: closed tickets give another agent the most tickets of all statuses (without 'open or
  pending')."""
  def ticket(**kw):
    t = {"id": 5001 + len(tickets), "customer_email": G.email_of(rng.choice(customers), len(tickets)),
         "subject": rng.choice(SUBJECTS), "priority": rng.choice(("low", "normal")), "status": "open",
         "created": G.rand_date(rng), "assignee_id": None, "body": G.sentence(rng, 12)}
    t.update(kw)
    tickets.append(t)
    sla.append({"ticket_id": t["id"], "busy": int(rng.random() < 0.3),
                "response_minutes": rng.randint(max(5, SLA_TARGET_H[t["priority"]] * 12),
                                                SLA_TARGET_H[t["priority"]] * 120)})

  tier1 = [i for i, t in enumerate(teams) if t == "tier1"]
  tier2 = [i for i, t in enumerate(teams) if t == "tier2"]
  on2 = [i for i in tier2 if duty[i]]
  off2 = rng.choice([i for i in tier2 if not duty[i]] or on2)
  duty[off2] = 0
  idle = rng.choice(tier1)
  duty[idle] = 1
  helpers = [i for i, t in enumerate(teams) if t != "tier2" and i != idle]
  for t in tickets:
    if t["status"] == "open" and t["assignee_id"] in (idle + 1, off2 + 1):
      t["assignee_id"] = rng.choice(helpers) + 1
  for i in tier2:
    if duty[i] and not any(t["status"] == "open" and t["assignee_id"] == i + 1 for t in tickets):
      ticket(assignee_id=i + 1)
  live = collections.Counter(t["assignee_id"] for t in tickets if t["status"] in ("open", "pending"))
  every = collections.Counter(t["assignee_id"] for t in tickets)
  lead = min(range(1, len(teams) + 1), key=lambda a: (-live[a], a))
  rival = rng.choice([a for a in range(1, len(teams) + 1) if a != lead])
  for _ in range(every[lead] - every[rival] + rng.randint(1, 4)):
    ticket(status="closed", assignee_id=rival, priority=rng.choice(PRIORITIES))


# -- tools

def _get_ticket(ctx, ticket_id):
  r = ctx.q1("SELECT * FROM tickets WHERE id = ?", ticket_id)
  if r is None:
    raise ToolError(f"no ticket with id {ticket_id}")
  return r


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


def _add_comment(ctx, ticket_id, text):
  _get_ticket(ctx, ticket_id)
  if not text.strip():
    raise ToolError("the comment is empty")
  ctx.exec("INSERT INTO comments (ticket_id, text) VALUES (?, ?)", ticket_id, text)
  return {"ticket_id": ticket_id, "added": True}


def _duration(minutes: int) -> str:
  return f"{minutes} minutes" if minutes < 120 else f"{minutes // 60} h {minutes % 60:02d} min"


def _sla_report(ctx, ticket_id):
  t = _get_ticket(ctx, ticket_id)
  s = ctx.q1("SELECT * FROM sla WHERE ticket_id = ?", ticket_id)
  key = ("sla_report", ticket_id)
  n = ctx.calls.get(key, 0)
  ctx.calls[key] = n + 1
  if s["busy"] and n == 0:   # an error object, not a failed call: the caller must look at `ok`
    return {"ok": False, "ticket_id": ticket_id, "error": "SLA service busy, report not ready; ask again"}
  target = SLA_TARGET_H[t["priority"]]
  return {"ok": True, "ticket_id": ticket_id,
          "report": f"Ticket {ticket_id} ({t['priority']} priority), opened {t['created']}. First response "
                    f"after {_duration(s['response_minutes'])}; target: {target} hour{'s' * (target > 1)}."}


TOOLS = (
    B.list_tool("list_tickets", "List tickets [{id, subject, priority, status, created, assignee_id}] "
                "(assignee_id null = unassigned), optionally filtered.", table="tickets",
                columns="id, subject, priority, status, created, assignee_id", filters=[
                    B.Filter("status", "status = ?", B.p_str("ticket status", STATUSES)),
                    B.Filter("priority", "priority = ?", B.p_str("priority", PRIORITIES)),
                    B.Filter("assignee_id", "assignee_id = ?", B.p_int("only tickets of this agent")),
                    B.Filter("assigned", "(assignee_id IS NOT NULL) = ?",
                             {"type": "boolean", "description": "true: only assigned, false: only unassigned"}),
                    B.Filter("created_before", "created < ?", B.p_str("only created before this date (YYYY-MM-DD)")),
                    B.Filter("created_from", "created >= ?", B.p_str("only created on or after this date")),
                    B.Filter("subject", "subject LIKE ?", B.p_str("text the subject contains"), like=True)]),
    B.tool("get_ticket", "Get one ticket with its body.", _get_ticket, required=("ticket_id",),
           ticket_id=B.p_int("ticket id")),
    B.list_tool("list_agents", "List the support agents [{id, name, team, on_duty}] (on_duty 1 or 0).",
                table="agents", columns="id, name, team, on_duty", filters=[
                    B.Filter("team", "team = ?", B.p_str("team", TEAMS)),
                    B.Filter("on_duty", "on_duty = ?", {"type": "boolean", "description": "on duty or not"})]),
    B.tool("assign_ticket", "Assign a ticket to an agent.", _assign, required=("ticket_id", "agent_id"),
           ticket_id=B.p_int("ticket id"), agent_id=B.p_int("agent id")),
    B.tool("set_ticket_status", "Set a ticket's status.", _set_status, required=("ticket_id", "status"),
           ticket_id=B.p_int("ticket id"), status=B.p_str("new status", STATUSES)),
    B.tool("add_comment", "Add an internal comment to a ticket.", _add_comment, required=("ticket_id", "text"),
           ticket_id=B.p_int("ticket id"), text=B.p_str("the comment text")),
    B.tool("sla_report", "The SLA service's first-response report on one ticket: {ok, ticket_id, report} with "
           "the report as text, or {ok: false, ticket_id, error} when the service cannot answer right now.",
           _sla_report, required=("ticket_id",), ticket_id=B.p_int("ticket id")),
    B.LIST_FILES, B.READ_FILE,
)

DOMAIN = B.Domain("helpdesk", "A support desk's tickets and agents.", SCHEMA, generate, TOOLS)

# -- tasks

ONCALL = """\
name = tools["read_file"](path="oncall.txt")["content"].split(":", 1)[1].strip()
agent = next(a for a in tools["list_agents"](team="tier2")["items"] if a["name"] == name)
todo, offset = [], 0
while offset is not None:
    page = tools["list_tickets"](status="open", priority="urgent", assigned=False, offset=offset)
    todo += [t["id"] for t in page["items"]]
    offset = page["next_offset"]
for tid in todo:
    tools["assign_ticket"](ticket_id=tid, agent_id=agent["id"])
print(name, todo)
tools["submit_answer"]()
"""

REFUND = """\
ids = []
for path in tools["list_files"](directory="transcripts"):
    text = tools["read_file"](path=path)["content"]
    if "refund" in text.lower():
        ids.append(int(text.split(":", 1)[0].split()[1]))
print(ids)
tools["submit_answer"](answer=ids)
"""

CLOSE = """\
targets, offset = [], 0
while offset is not None:   # collect first: closing tickets shifts the pages of 'resolved'
    page = tools["list_tickets"](status="resolved", created_before="2024-05-01", offset=offset)
    targets += [t["id"] for t in page["items"]]
    offset = page["next_offset"]
for tid in targets:
    tools["set_ticket_status"](ticket_id=tid, status="closed")
print(len(targets))
tools["submit_answer"]()
"""

BUSIEST = """\
agents = tools["list_agents"]()["items"]
names = {a["id"]: a["name"] for a in agents}
counts = {}
for a in agents:
    counts[a["id"]] = sum(tools["list_tickets"](status=st, assignee_id=a["id"], limit=1)["total"]
                          for st in ("open", "pending"))
best = min(counts, key=lambda a: (-counts[a], a))
print(names[best], counts[best])
tools["submit_answer"](answer=names[best])
"""

SLA = """\
import re
tickets, offset = [], 0
for prio in ("high", "urgent"):
    offset = 0
    while offset is not None:
        page = tools["list_tickets"](status="open", priority=prio, offset=offset)
        tickets += page["items"]
        offset = page["next_offset"]
breached = []
for t in tickets:
    for attempt in range(5):
        r = tools["sla_report"](ticket_id=t["id"])
        if r["ok"]:
            break
    else:
        raise RuntimeError(f"no SLA report for {t['id']}")
    text = r["report"]
    m = re.search(r"after (\\d+) h (\\d+) min", text)
    took = int(m.group(1)) * 60 + int(m.group(2)) if m else int(re.search(r"after (\\d+) minutes", text).group(1))
    target = int(re.search(r"target: (\\d+) hour", text).group(1)) * 60
    if took > target:
        breached.append(t["id"])
print(len(tickets), breached)
tools["submit_answer"](answer=breached)
"""

SLA_WRONG = SLA.replace("""    for attempt in range(5):
        r = tools["sla_report"](ticket_id=t["id"])
        if r["ok"]:
            break
    else:
        raise RuntimeError(f"no SLA report for {t['id']}")
""", """    r = tools["sla_report"](ticket_id=t["id"])
    if not r["ok"]:
        continue
""")

HANDOVER = """\
import re
note = next(p for p in tools["list_files"]() if "handover" in p)
listed = [int(x) for x in re.findall(r"(?:#|ticket |T-)(\\d+)", tools["read_file"](path=note)["content"])]
live = [tid for tid in listed if tools["get_ticket"](ticket_id=tid)["status"] in ("open", "pending")]
load = {a["id"]: tools["list_tickets"](status="open", assignee_id=a["id"], limit=1)["total"]
        for a in tools["list_agents"](team="tier2", on_duty=True)["items"]}
target = min(load, key=lambda a: (load[a], a))
for tid in live:
    tools["assign_ticket"](ticket_id=tid, agent_id=target)
    tools["add_comment"](ticket_id=tid, text="escalated")
print(note, listed, live, target)
tools["submit_answer"]()
"""


def _tickets(ctx):
  return {r["id"]: (r["status"], r["assignee_id"]) for r in ctx.q("SELECT id, status, assignee_id FROM tickets")}


def _comments(ctx):
  return sorted((r["ticket_id"], r["text"].strip().lower()) for r in ctx.q("SELECT ticket_id, text FROM comments"))


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


def _refund_expected(ctx):
  out = []
  for p in ctx.files("transcripts"):
    text = ctx.read(p)
    if "refund" in text.lower():
      out.append(int(text.split(":", 1)[0].split()[1]))
  return sorted(out)


def _sla_expected(ctx):
  return [r["id"] for r in ctx.q(
      "SELECT t.id, t.priority, s.response_minutes FROM tickets t JOIN sla s ON s.ticket_id = t.id "
      "WHERE t.status = 'open' AND t.priority IN ('high', 'urgent') ORDER BY t.id")
          if r["response_minutes"] > SLA_TARGET_H[r["priority"]] * 60]


def _handover_expected(ctx):
  note = next(p for p in ctx.files() if "handover" in p)
  listed = [int(x) for x in re.findall(r"(?:#|ticket |T-)(\d+)", ctx.read(note))]
  live = [t for t in listed if ctx.scalar("SELECT status FROM tickets WHERE id = ?", t) in ("open", "pending")]
  target = ctx.scalar("SELECT a.id FROM agents a WHERE a.team = 'tier2' AND a.on_duty = 1 ORDER BY (SELECT "
                      "COUNT(*) FROM tickets t WHERE t.assignee_id = a.id AND t.status = 'open'), a.id LIMIT 1")
  want = _tickets(ctx)
  for t in live:
    want[t] = (want[t][0], target)
  return {"tickets": want, "comments": sorted((t, "escalated") for t in live)}


TASKS = [
    B.Task(DOMAIN, "assign_urgent_oncall",
           "Assign every open ticket of priority 'urgent' that has no assignee to the on-call agent named in "
           "oncall.txt. Change nothing else.", (ONCALL,), _oncall_expected,
           check=lambda ctx, e, a: _tickets(ctx) == e, wrong=("assigned=False, ", ""),
           conditions=(("open", ('status="open", ', '')), ("urgent", ('priority="urgent", ', '')))),
    B.Task(DOMAIN, "refund_transcripts",
           "Which of the chat transcripts in transcripts/ contain the word 'refund' (in any letter case)? Submit "
           "the list of their ticket ids (numbers).", (REFUND,), _refund_expected, answer="set",
           wrong=(".lower()", "")),
    B.Task(DOMAIN, "close_old_resolved",
           "Set the status of every 'resolved' ticket created before 2024-05-01 to 'closed'. Change nothing else.",
           (CLOSE,), _close_expected, check=lambda ctx, e, a: _tickets(ctx) == e,
           wrong=('created_before="2024-05-01", ', ""), tags=("paging",),
           conditions=(("resolved", ('status="resolved", ', '')),)),
    B.Task(DOMAIN, "busiest_agent",
           "Which agent is assigned the most tickets whose status is 'open' or 'pending'? Submit the agent's "
           "name (on a tie, the agent with the smaller id).", (BUSIEST,),
           lambda ctx: ctx.scalar("SELECT a.name FROM tickets t JOIN agents a ON a.id = t.assignee_id WHERE "
                                  "t.status IN ('open', 'pending') GROUP BY a.id ORDER BY COUNT(*) DESC, a.id LIMIT 1"),
           answer="text", wrong=("best = min(counts, key=lambda a: (-counts[a], a))",
                                 "best = sorted(counts, key=lambda a: (-counts[a], a))[1]"),
           conditions=(("open or pending", ('for st in ("open", "pending")', 'for st in (None,)')),)),
    B.Task(DOMAIN, "sla_breaches",
           "Which open tickets of priority 'high' or 'urgent' missed their first-response target, according to "
           "the SLA service (sla_report)? Submit the list of their ticket ids.", (SLA,), _sla_expected,
           answer="set", wrong=SLA_WRONG, tags=("errors",),
           conditions=(("open", ('status="open", ', '')),
                       ("high or urgent", ('for prio in ("high", "urgent"):', 'for prio in (None,):')))),
    B.Task(DOMAIN, "escalate_handover",
           "A shift handover note somewhere in the workspace lists tickets to escalate. Escalate each listed "
           "ticket whose status is 'open' or 'pending': assign it to the on-duty tier2 agent with the fewest "
           "open tickets (count before you change anything; on a tie, the smaller agent id) and add the comment "
           "'escalated' to it. Leave the other listed tickets alone and change nothing else.", (HANDOVER,),
           _handover_expected,
           check=lambda ctx, e, a: _tickets(ctx) == e["tickets"] and _comments(ctx) == e["comments"],
           wrong=('["status"] in ("open", "pending")', '["status"] != "spam"'), tags=("explore", "writeback"),
           conditions=(("tier2", ('team="tier2", ', '')), ("on duty", (', on_duty=True', '')))),
]

"""Sports domain: a football league's teams, players, matches and goals; match reports are free text and the
medical staff's injury reports are workspace files."""

from __future__ import annotations

import csv
import datetime
import io
import json
import random

from progagent.tasks import base as B
from progagent.tasks import generators as G
from progagent.tasks.base import Ctx, ToolError
from progagent.tasks.workspace import read_records

TOWNS = ("Lisbon", "Porto", "Madrid", "Lyon", "Berlin", "Oslo", "Krakow", "Dublin", "Braga", "Faro", "Seville",
         "Nantes", "Munich", "Bergen", "Gdansk", "Cork")
MASCOTS = ("Lions", "Eagles", "Wolves", "Sharks", "Falcons", "Bears", "Rovers", "Rangers", "United", "Athletic",
           "Wanderers", "Dynamo", "Comets", "Pirates", "Hornets", "Stags")
POSITIONS = ("GK", "DF", "MF", "FW")
KINDS = ("regular", "penalty", "own goal")
MATCH_STATUSES = ("played", "scheduled", "postponed")
INJURIES = ("hamstring strain", "ankle sprain", "knee ligament", "concussion", "broken wrist", "groin strain",
            "calf tear", "shoulder dislocation")
MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
               "November", "December")

SCHEMA = """
CREATE TABLE teams (id INTEGER PRIMARY KEY, name TEXT, city TEXT);
CREATE TABLE players (id INTEGER PRIMARY KEY, name TEXT, team_id INTEGER, position TEXT, born TEXT, salary REAL);
CREATE TABLE matches (id INTEGER PRIMARY KEY, date TEXT, home_id INTEGER, away_id INTEGER, home_score INTEGER,
                      away_score INTEGER, status TEXT);
CREATE TABLE goals (id INTEGER PRIMARY KEY, match_id INTEGER, player_id INTEGER, team_id INTEGER, minute INTEGER,
                    kind TEXT);
CREATE TABLE reports (match_id INTEGER PRIMARY KEY, attendance INTEGER, report TEXT);
CREATE INDEX goals_match ON goals(match_id);
CREATE INDEX players_team ON players(team_id);
"""


def _report(rng: random.Random, m: dict, home: str, away: str, attendance: int, scorers: list[str]) -> str:
  crowd = rng.choice((f"A crowd of {attendance:,} watched", f"Attendance: {attendance}.",
                      f"{attendance:,} spectators saw", f"In front of {attendance} fans,"))
  score = f"{home} {m['home_score']}-{m['away_score']} {away}"
  parts = [f"{score} on {m['date']}. {crowd}" if crowd.startswith("Attendance") else f"{crowd} {score} on {m['date']}."]
  if scorers:
    parts.append("Goals: " + ", ".join(scorers) + ".")
  parts.append(f"Referee {rng.choice(G.FIRST)} {rng.choice(G.LAST)} showed {rng.randint(0, 6)} yellow cards.")
  parts.append(G.sentence(rng, 10))
  return " ".join(parts)


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  n_teams, n_matches = 12 * f, 110 * f
  names = rng.sample([f"{t} {m}" for t in TOWNS for m in MASCOTS], n_teams)
  teams = [{"id": i + 1, "name": nm, "city": nm.split()[0]} for i, nm in enumerate(names)]
  G.insert_rows(ctx, "teams", teams)
  pnames = G.unique_names(rng, 22 * n_teams)
  players, squad = [], {}
  for t in teams:
    for k in range(22):
      pos = "GK" if k < 2 or (k == 2 and rng.random() < 0.5) else rng.choices(POSITIONS[1:], (8, 7, 5))[0]
      p = {"id": len(players) + 1, "name": pnames[len(players)], "team_id": t["id"], "position": pos,
           "born": G.rand_date(rng, "1986-01-01", "2006-12-31"), "salary": float(rng.randint(40, 4000) * 1000)}
      players.append(p)
      squad.setdefault(t["id"], []).append(p)
  G.insert_rows(ctx, "players", players)
  matches, goals = [], []
  n_post = max(1, round(rng.uniform(0.03, 0.07) * n_matches))
  statuses = ["scheduled"] * round(0.15 * n_matches) + ["postponed"] * n_post
  statuses += ["played"] * (n_matches - len(statuses))
  rng.shuffle(statuses)
  n_goals = [0, 1, 1, 2, 2, 2, 3, 3, 4, 5] * (n_matches // 10 + 1)   # goals per match: a fixed mix, shuffled
  rng.shuffle(n_goals)
  for i in range(n_matches):
    home, away = rng.sample(teams, 2)
    status = statuses[i]
    if status == "scheduled":
      date = G.rand_date(rng, "2024-07-06", "2024-07-31")
    elif status == "postponed":   # postponed recently
      date = G.rand_date(rng, "2024-06-11", "2024-06-30")
    else:
      date = G.rand_date(rng, "2024-01-06", "2024-06-30")
    m = {"id": i + 1, "date": date, "home_id": home["id"], "away_id": away["id"], "home_score": None,
         "away_score": None, "status": status}
    matches.append(m)
    if status != "played":
      continue
    m["home_score"], m["away_score"] = 0, 0
    for _ in range(n_goals.pop()):
      side = rng.choice(("home", "away"))
      team = home if side == "home" else away
      other = away if side == "home" else home
      r = rng.random()
      if r < 0.05:
        scorer, kind = rng.choice(squad[other["id"]]), "own goal"
      else:
        outfield = [p for p in squad[team["id"]] if p["position"] != "GK"]
        scorer = rng.choices(outfield, [3 if p["position"] == "FW" else 1 for p in outfield])[0]
        kind = "penalty" if r < 0.15 else "regular"
      m[f"{side}_score"] += 1
      goals.append({"match_id": m["id"], "player_id": scorer["id"], "team_id": team["id"],
                    "minute": rng.randint(1, 90), "kind": kind})
  played_may = [m for m in matches if m["status"] == "played" and m["date"].startswith("2024-05")]

  def add_goal(m, player, kind):
    side = "home" if (m["home_id"] == player["team_id"]) == (kind != "own goal") else "away"
    m[f"{side}_score"] += 1
    goals.append({"match_id": m["id"], "player_id": player["id"], "team_id": m[f"{side}_id"],
                  "minute": rng.randint(1, 90), "kind": kind})

  # planted (rng-chosen): May's top scorer P, and Q whose own goals would put him ahead if they were counted;
  # both from forwards without a May goal so far whose teams played in May
  may_ids = {m["id"] for m in played_may}
  scored = {g["player_id"] for g in goals if g["match_id"] in may_ids}
  may_teams = {m["home_id"] for m in played_may} | {m["away_id"] for m in played_may}
  p_star, q_star = rng.sample([p for p in players if p["position"] == "FW" and p["id"] not in scored
                               and p["team_id"] in may_teams], 2)
  k = rng.randint(5, 7)
  for star, kinds in ((p_star, ["regular"] * (k - 1) + ["penalty"]),
                      (q_star, ["regular"] * (k - 1) + ["own goal"] * 2)):
    pool = [m for m in played_may if star["team_id"] in (m["home_id"], m["away_id"])]
    for kind in kinds:
      add_goal(rng.choice(pool), star, kind)
  # planted: a few players with two or more penalties over the season
  played = [m for m in matches if m["status"] == "played"]
  takers = [p for p in players if p["position"] != "GK" and p not in (p_star, q_star)]
  for p in rng.sample(takers, rng.randint(1, 3) * f):
    pool = [m for m in played if p["team_id"] in (m["home_id"], m["away_id"])]
    for _ in range(rng.randint(2, 3) if pool else 0):
      add_goal(rng.choice(pool), p, "penalty")
  goals.sort(key=lambda g: (g["match_id"], g["minute"]))
  tname = {t["id"]: t["name"] for t in teams}
  pname = {p["id"]: p["name"] for p in players}
  reports = []
  for m in matches:
    if m["status"] != "played":
      continue
    att = rng.randint(2_000, 65_000)
    scorers = [f"{pname[g['player_id']]} {g['minute']}'" + (" (pen.)" if g["kind"] == "penalty" else " (o.g.)"
                                                             if g["kind"] == "own goal" else "")
               for g in goals if g["match_id"] == m["id"]]
    reports.append({"match_id": m["id"], "attendance": att,
                    "report": _report(rng, m, tname[m["home_id"]], tname[m["away_id"]], att, scorers)})
  G.write_docs(ctx, rng, "sports", ["league_rules", "ticketing", "medical", "transfers", "media"])
  # injury reports: 4 * f files in three formats, each player at most once
  n = B.n_data_files(f)
  fmts = ["csv", "json", "txt"] + [rng.choice(("csv", "json", "txt")) for _ in range(n - 3)]
  rng.shuffle(fmts)
  pool = rng.sample(players, 6 * n)
  for j, fmt in enumerate(fmts):
    items = pool[6 * j:6 * j + rng.randint(3, 6)]
    backs = [datetime.date.fromisoformat(G.rand_date(rng, "2024-07-02", "2024-10-31")) for _ in items]
    if fmt == "json":   # planted: a long injury in a JSON report
      backs[0] = datetime.date.fromisoformat(G.rand_date(rng, "2024-08-01", "2024-10-31"))
    day = G.rand_date(rng, "2024-06-20", "2024-06-30")
    if fmt == "csv":
      buf = io.StringIO()
      w = csv.writer(buf, lineterminator="\n")
      w.writerow(["player_id", "injury", "expected_return"])
      for p, b in zip(items, backs):
        w.writerow([p["id"], rng.choice(INJURIES), b.isoformat()])
      text = buf.getvalue()
    elif fmt == "json":
      text = json.dumps({"report_date": day, "players": [
          {"name": p["name"], "injury": rng.choice(INJURIES), "back": b.strftime("%d.%m.%Y")}
          for p, b in zip(items, backs)]}, indent=2, ensure_ascii=False) + "\n"
    else:
      text = f"Medical update, {day}\n\n" + "\n".join(
          f"Player: {p['name']}\nInjury: {rng.choice(INJURIES)}\nExpected back: {b.day} {MONTH_NAMES[b.month - 1]} "
          f"{b.year}\n" for p, b in zip(items, backs))
    ctx.write(f"medical/update_{j + 1:03d}.{fmt}", text)
  # The distractor of may_top_scorer without 'May' (base.Task.conditions; drawn last, so the rest of the state is
  # what it would be without it): a forward who scores more than May's top scorer over the season, outside May
  # (the reports of the matches concerned are written again, with the same attendance).
  may_ids = {m["id"] for m in played_may}
  tally = lambda pid, ids=None: sum(1 for g in goals if g["player_id"] == pid and g["kind"] != "own goal"
                                    and (ids is None or g["match_id"] in ids))
  best = min({g["player_id"] for g in goals if g["match_id"] in may_ids}, key=lambda p: (-tally(p, may_ids), p))
  elsewhere = {t: [m for m in played if t in (m["home_id"], m["away_id"]) and m["id"] not in may_ids]
               for t in range(1, n_teams + 1)}
  rival = rng.choice([p for p in players if p["position"] == "FW" and p["id"] != best
                      and len(elsewhere[p["team_id"]]) >= 3])
  touched = set()
  while tally(rival["id"]) <= tally(best):
    m = rng.choice(elsewhere[rival["team_id"]])
    add_goal(m, rival, "regular")
    touched.add(m["id"])
  goals.sort(key=lambda g: (g["match_id"], g["minute"]))
  for j, g in enumerate(goals):
    g["id"] = j + 1
  for r in reports:
    if r["match_id"] in touched:
      m = matches[r["match_id"] - 1]
      scorers = [f"{pname[g['player_id']]} {g['minute']}'" + (" (pen.)" if g["kind"] == "penalty" else " (o.g.)"
                                                               if g["kind"] == "own goal" else "")
                 for g in goals if g["match_id"] == m["id"]]
      r["report"] = _report(rng, m, tname[m["home_id"]], tname[m["away_id"]], r["attendance"], scorers)
  G.insert_rows(ctx, "matches", matches)
  G.insert_rows(ctx, "goals", [{k2: g[k2] for k2 in ("id", "match_id", "player_id", "team_id", "minute", "kind")}
                               for g in goals])
  G.insert_rows(ctx, "reports", reports)


# -- tools

def _match_report(ctx, match_id):
  m = ctx.q1("SELECT status FROM matches WHERE id = ?", match_id)
  if m is None:
    raise ToolError(f"no match with id {match_id}")
  r = ctx.q1("SELECT report FROM reports WHERE match_id = ?", match_id)
  if r is None:
    raise ToolError(f"match {match_id} has no report: it is {m['status']}, not played")
  return {"match_id": match_id, "report": r["report"]}


def _reschedule(ctx, match_id, date):
  m = ctx.q1("SELECT status FROM matches WHERE id = ?", match_id)
  if m is None:
    raise ToolError(f"no match with id {match_id}")
  if m["status"] == "played":
    raise ToolError(f"match {match_id} has been played")
  try:
    datetime.date.fromisoformat(date)
  except (TypeError, ValueError):
    raise ToolError(f"date must be 'YYYY-MM-DD', got {date!r}") from None
  if date <= B.TODAY:
    raise ToolError(f"a match can only be rescheduled to a date after {B.TODAY}")
  ctx.exec("UPDATE matches SET date = ?, status = 'scheduled' WHERE id = ?", date, match_id)
  return {"match_id": match_id, "date": date, "status": "scheduled"}


TOOLS = (
    B.list_tool("list_players", "List players (id, name, team, position, born, salary), optionally filtered.",
                table="players p JOIN teams t ON t.id = p.team_id",
                columns="p.id AS id, p.name AS name, t.name AS team, p.position AS position, p.born AS born, "
                        "p.salary AS salary", order_by="p.id",
                filters=[B.Filter("player_id", "p.id = ?", B.p_int("only the player with this id")),
                         B.Filter("name", "p.name LIKE ?", B.p_str("only names containing this text"), like=True),
                         B.Filter("team", "t.name = ?", B.p_str("only players of this team (its name)")),
                         B.Filter("position", "p.position = ?", B.p_str("position", POSITIONS)),
                         B.Filter("born_before", "p.born < ?", B.p_str("only players born before 'YYYY-MM-DD'"))]),
    B.list_tool("list_matches", "List matches (id, date, home, away, home_score, away_score, status), optionally "
                "filtered.", table="matches m JOIN teams h ON h.id = m.home_id JOIN teams a ON a.id = m.away_id",
                columns="m.id AS id, m.date AS date, h.name AS home, a.name AS away, m.home_score AS home_score, "
                        "m.away_score AS away_score, m.status AS status", order_by="m.id",
                filters=[B.Filter("status", "m.status = ?", B.p_str("match status", MATCH_STATUSES)),
                         B.Filter("team", "? IN (h.name, a.name)", B.p_str("only matches of this team (its name)")),
                         B.Filter("date_from", "m.date >= ?", B.p_str("on or after 'YYYY-MM-DD'")),
                         B.Filter("date_to", "m.date <= ?", B.p_str("on or before 'YYYY-MM-DD'"))]),
    B.list_tool("list_goals", "List goals (id, match_id, date, player_id, player, minute, kind), optionally "
                "filtered; kind is 'regular', 'penalty' or 'own goal' (an own goal counts for the other team).",
                table="goals g JOIN matches m ON m.id = g.match_id JOIN players p ON p.id = g.player_id",
                columns="g.id AS id, g.match_id AS match_id, m.date AS date, g.player_id AS player_id, p.name AS "
                        "player, g.minute AS minute, g.kind AS kind", order_by="g.id",
                filters=[B.Filter("match_id", "g.match_id = ?", B.p_int("only goals of this match")),
                         B.Filter("player_id", "g.player_id = ?", B.p_int("only goals of this player")),
                         B.Filter("kind", "g.kind = ?", B.p_str("kind of goal", KINDS)),
                         B.Filter("date_from", "m.date >= ?", B.p_str("on or after 'YYYY-MM-DD'")),
                         B.Filter("date_to", "m.date <= ?", B.p_str("on or before 'YYYY-MM-DD'"))]),
    B.tool("get_match_report", "Get the written report of a played match: {match_id, report} (free text).",
           _match_report, required=("match_id",), match_id=B.p_int("match id")),
    B.tool("reschedule_match", "Move a postponed or scheduled match to a new date (after today); its status "
           "becomes 'scheduled'.", _reschedule, required=("match_id", "date"), match_id=B.p_int("match id"),
           date=B.p_str("new date 'YYYY-MM-DD'")),
    B.LIST_FILES, B.READ_FILE, B.WRITE_FILE,
)

DOMAIN = B.Domain("sports", "A football league's teams, players, matches, goals, match reports and medical "
                  "updates.", SCHEMA, generate, TOOLS)

# -- tasks

ALL = B.paging_prelude("fetch", tool="tool_name", kwargs="kw", rows="out", offset="off", limit_first=False)

TOP_SCORER = ALL + """\
from collections import Counter
goals = Counter()
name = {}
for g in fetch("list_goals", date_from="2024-05-01", date_to="2024-05-31"):
    if g["kind"] != "own goal":
        goals[g["player_id"]] += 1
        name[g["player_id"]] = g["player"]
best = min(goals, key=lambda p: (-goals[p], p))
print(name[best], goals[best])
tools["submit_answer"](answer=name[best])
"""

GK_SALARY = ALL + """\
keepers = fetch("list_players", position="GK", born_before="1995-01-01")
avg = round(sum(p["salary"] for p in keepers) / len(keepers), 2)
print(len(keepers), avg)
tools["submit_answer"](answer=avg)
"""

PENALTIES = ALL + """\
from collections import Counter
pens = Counter()
name = {}
for g in fetch("list_goals", kind="penalty"):
    pens[g["player_id"]] += 1
    name[g["player_id"]] = g["player"]
out = sorted(name[p] for p, k in pens.items() if k >= 2)
print(out)
tools["submit_answer"](answer=out)
"""

RESCHEDULE = ALL + """\
import datetime
rows = ["match_id,home,away,date"]
for m in fetch("list_matches", status="postponed"):
    new = (datetime.date.fromisoformat(m["date"]) + datetime.timedelta(days=21)).isoformat()
    tools["reschedule_match"](match_id=m["id"], date=new)
    rows.append(f"{m['id']},{m['home']},{m['away']},{new}")
tools["write_file"](path="fixtures/rescheduled.csv", content="\\n".join(rows) + "\\n")
print(len(rows) - 1, "rescheduled")
tools["submit_answer"]()
"""

INJURIES_PROG = ALL + r"""
import csv, io, json, datetime
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
out = {}   # player id -> salary
def salary_by(**kw):
    for p in fetch("list_players", **kw):
        if kw.get("name") in (None, p["name"]):
            return p["id"], p["salary"]
    raise RuntimeError(kw)
for path in tools["list_files"](directory="medical"):
    text = tools["read_file"](path=path)["content"]
    if path.endswith(".csv"):
        entries = [({"player_id": int(r["player_id"])}, datetime.date.fromisoformat(r["expected_return"]))
                   for r in csv.DictReader(io.StringIO(text))]
    elif path.endswith(".json"):
        entries = [({"name": p["name"]}, datetime.datetime.strptime(p["back"], "%d.%m.%Y").date())
                   for p in json.loads(text)["players"]]
    else:
        entries, who = [], None
        for line in text.splitlines():
            if line.startswith("Player: "):
                who = line.split(": ", 1)[1].strip()
            elif line.startswith("Expected back: "):
                d, mon, y = line.split(": ", 1)[1].split()
                entries.append(({"name": who}, datetime.date(int(y), MONTHS.index(mon) + 1, int(d))))
    for key, back in entries:
        if back > datetime.date(2024, 7, 31):
            pid, sal = salary_by(**key)
            out[pid] = sal
total = round(sum(out.values()), 2)
print(len(out), total)
tools["submit_answer"](answer=total)
"""

INJURIES_WRONG = INJURIES_PROG.replace('elif path.endswith(".json"):', 'elif path.endswith(".json") and False:')

ATTENDANCE = ALL + r"""
import re
total = 0
for m in fetch("list_matches", status="played", date_from="2024-06-01", date_to="2024-06-30"):
    text = tools["get_match_report"](match_id=m["id"])["report"]
    hit = re.search(r"(?:crowd of|Attendance:|In front of)\s*([\d,]+)|([\d,]+) spectators", text)
    total += int((hit.group(1) or hit.group(2)).replace(",", ""))
print(total)
tools["submit_answer"](answer=total)
"""

ATTENDANCE_WRONG = ALL + r"""
import re
total = 0
for m in fetch("list_matches", status="played", date_from="2024-06-01", date_to="2024-06-30"):
    text = tools["get_match_report"](match_id=m["id"])["report"]
    hit = re.search(r"Attendance: (\d+)", text)
    if hit:
        total += int(hit.group(1))
tools["submit_answer"](answer=total)
"""


def _schedule(ctx):
  return {r["id"]: (r["date"], r["status"]) for r in ctx.q("SELECT id, date, status FROM matches")}


def _reschedule_expected(ctx):
  want = _schedule(ctx)
  rows = []
  for r in ctx.q("SELECT m.id, m.date, h.name AS home, a.name AS away FROM matches m JOIN teams h ON h.id = m.home_id "
                 "JOIN teams a ON a.id = m.away_id WHERE m.status = 'postponed' ORDER BY m.id"):
    new = (datetime.date.fromisoformat(r["date"]) + datetime.timedelta(days=21)).isoformat()
    want[r["id"]] = (new, "scheduled")
    rows.append([str(r["id"]), r["home"], r["away"], new])
  return {"schedule": want, "rows": rows}


def _reschedule_check(ctx, e, a):
  if _schedule(ctx) != {int(k): tuple(v) for k, v in e["schedule"].items()}:
    return False
  text = ctx.read("fixtures/rescheduled.csv")
  if text is None:
    return False
  rows = [[c.strip() for c in r] for r in csv.reader(io.StringIO(text.strip())) if r]
  return rows[:1] == [["match_id", "home", "away", "date"]] and rows[1:] == [list(r) for r in e["rows"]]


def _injury_expected(ctx):
  salary = {r["id"]: r["salary"] for r in ctx.q("SELECT id, salary FROM players")}
  by_name = {r["name"]: r["id"] for r in ctx.q("SELECT id, name FROM players")}
  out = set()
  for rel in ctx.files("medical"):
    recs = read_records(rel, ctx.read(rel), key="players")
    if rel.endswith(".csv"):
      out |= {int(r["player_id"]) for r in recs if r["expected_return"] > "2024-07-31"}
    elif rel.endswith(".json"):
      out |= {by_name[p["name"]] for p in recs
              if datetime.datetime.strptime(p["back"], "%d.%m.%Y").date().isoformat() > "2024-07-31"}
    else:
      out |= {by_name[d["Player"]] for d in recs
              if datetime.datetime.strptime(d["Expected back"], "%d %B %Y").date().isoformat() > "2024-07-31"}
  return round(sum(salary[i] for i in out), 2)


TASKS = [
    B.Task(DOMAIN, "may_top_scorer",
           "Who scored the most goals in the matches played in May 2024? Own goals do not count for the player who "
           "scored them. Submit the player's name (on a tie, the player with the smaller id).", (TOP_SCORER,),
           lambda ctx: ctx.scalar("SELECT p.name FROM goals g JOIN matches m ON m.id = g.match_id JOIN players p ON "
                                  "p.id = g.player_id WHERE m.date BETWEEN '2024-05-01' AND '2024-05-31' AND g.kind != "
                                  "'own goal' GROUP BY p.id ORDER BY COUNT(*) DESC, p.id LIMIT 1"),
           answer="text", wrong=('    if g["kind"] != "own goal":\n', '    if True:\n'),
           conditions=(("May", ('date_from="2024-05-01", date_to="2024-05-31"', '')),)),
    B.Task(DOMAIN, "veteran_keeper_salary",
           "What is the average salary of the goalkeepers (position 'GK') born before 1995-01-01? Round it to 2 "
           "decimals.", (GK_SALARY,),
           lambda ctx: round(ctx.scalar("SELECT AVG(salary) FROM players WHERE position = 'GK' AND born < "
                                        "'1995-01-01'"), 2), answer="number",
           wrong=('position="GK", born_before="1995-01-01"', 'position="GK"'),
           conditions=(("GK", ('position="GK", ', '')),)),
    B.Task(DOMAIN, "penalty_specialists",
           "Which players scored two or more penalties this season? Submit the list of their names.", (PENALTIES,),
           lambda ctx: [r["name"] for r in ctx.q("SELECT p.name FROM goals g JOIN players p ON p.id = g.player_id "
                                                 "WHERE g.kind = 'penalty' GROUP BY p.id HAVING COUNT(*) >= 2")],
           answer="set", wrong=("if k >= 2", "if k >= 1"),
           conditions=(("penalty", ('"list_goals", kind="penalty"', '"list_goals"')),)),
    B.Task(DOMAIN, "reschedule_postponed",
           "Reschedule every postponed match to 21 days after its original date, and write "
           "fixtures/rescheduled.csv with the header 'match_id,home,away,date' and "
           "one row per rescheduled match (team names, the new date), in increasing match id order.",
           (RESCHEDULE,), _reschedule_expected, check=_reschedule_check,
           wrong=("rows.append(f\"{m['id']},{m['home']},{m['away']},{new}\")",
                  "rows.append(f\"{m['id']},{m['home']},{m['away']},{m['date']}\")"), tags=("writeback",)),
    B.Task(DOMAIN, "long_injuries_payroll",
           "The medical staff keep injury updates in the workspace. What is the total salary of the players who "
           "are expected back only after 2024-07-31? Round it to 2 decimals.", (INJURIES_PROG,), _injury_expected,
           answer="number", wrong=INJURIES_WRONG, tags=("explore",),
           conditions=(("after July", ('if back > datetime.date(2024, 7, 31):', 'if True:')),)),
    B.Task(DOMAIN, "june_attendance",
           "What was the total attendance of all matches played in June 2024? The figures are in the match reports.",
           (ATTENDANCE,),
           lambda ctx: ctx.scalar("SELECT SUM(r.attendance) FROM reports r JOIN matches m ON m.id = r.match_id "
                                  "WHERE m.status = 'played' AND m.date BETWEEN '2024-06-01' AND '2024-06-30'"),
           answer="int", wrong=ATTENDANCE_WRONG, tags=("errors", "explore"),
           conditions=(("June", (', date_from="2024-06-01", date_to="2024-06-30"', '')),)),
]

"""HR domain: departments, employees and timesheets; performance reviews are workspace files."""

from __future__ import annotations

import json
import random
import re

from progagent.tasks import base as B
from progagent.tasks import generators as G
from progagent.tasks.base import Ctx, ToolError
from progagent.tasks.workspace import read_records

DEPARTMENTS = ("Engineering", "Sales", "Marketing", "Finance", "Support", "Legal", "Operations", "Research")
TITLES = ("Associate", "Specialist", "Senior Specialist", "Lead", "Manager", "Director")

SCHEMA = """
CREATE TABLE departments (id INTEGER PRIMARY KEY, name TEXT, location TEXT, budget REAL);
CREATE TABLE employees (id INTEGER PRIMARY KEY, name TEXT, email TEXT, dept_id INTEGER, title TEXT,
                        salary REAL, manager_id INTEGER, hire_date TEXT, active INTEGER, phone TEXT,
                        address TEXT);
CREATE TABLE timesheets (employee_id INTEGER PRIMARY KEY, hours REAL, overtime REAL, busy INTEGER);
CREATE INDEX employees_dept ON employees(dept_id);
"""


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  G.insert_rows(ctx, "departments", [{"id": i + 1, "name": d, "location": rng.choice(G.CITIES),
                                      "budget": float(rng.randint(5, 50) * 100_000)}
                                     for i, d in enumerate(DEPARTMENTS)])
  n = 670 * f
  names = G.unique_names(rng, n + 2)
  local = rng.uniform(0.2, 0.7)   # how often a manager is picked inside the employee's own department
  emps, by_dept = [], {d: [] for d in range(1, 9)}
  for i in range(n):
    dept = rng.choices(range(1, 9), (5, 4, 2, 2, 3, 1, 2, 2))[0]
    mgr = None
    if i >= 4:
      same = by_dept[dept]
      mgr = rng.choice(same) if same and rng.random() < local else rng.randint(1, i)
    by_dept[dept].append(i + 1)
    emps.append({"id": i + 1, "name": names[i], "email": G.email_of(names[i], i + 1, "corp.example"),
                 "dept_id": dept, "title": rng.choice(TITLES),
                 "salary": round(rng.uniform(40_000, 160_000), 2), "manager_id": mgr,
                 "hire_date": G.rand_date(rng, "2005-01-01", "2024-06-01"), "active": int(rng.random() < 0.85),
                 "phone": f"+351 21 {rng.randint(100, 999)} {rng.randint(1000, 9999)}",
                 "address": f"{rng.randint(1, 200)} {rng.choice(G.LAST)} Road, {rng.choice(G.CITIES)}"})
  # A departed Sales employee hired before anyone else (the trap of the earliest-hire task; date seeded).
  emps.append(dict(emps[0], id=n + 1, name=names[n], email=G.email_of(names[n], n + 1, "corp.example"),
                   dept_id=2, hire_date=G.rand_date(rng, "1995-01-01", "2004-12-31"), active=0, manager_id=None))
  for d in range(1, 9):   # every department has active staff
    emps[d]["dept_id"], emps[d]["active"] = d, 1
  # A departed Legal employee whose manager works elsewhere (the trap of cross_dept_managers).
  emps.append(dict(emps[1], id=n + 2, name=names[n + 1], email=G.email_of(names[n + 1], n + 2, "corp.example"),
                   dept_id=6, active=0, manager_id=rng.choice([e["id"] for e in emps if e["dept_id"] != 6])))
  # June timesheets; `busy` (hidden) is how many times the service answers "busy" before giving the summary.
  G.insert_rows(ctx, "timesheets", [{"employee_id": e["id"], "hours": rng.randint(300, 350) / 2,
                                     "overtime": rng.choice((0, 0, 0, 1, 2, 3, 4, 6, 8, 10, 12)) + rng.choice((0, .5)),
                                     "busy": rng.choice((0, 0, 1, 2))} for e in emps if e["active"]])
  G.write_docs(ctx, rng, "hr", ["leave_policy", "benefits", "review_process", "onboarding", "org_chart"])
  # Reviews in three formats and two rating scales; a seeded number of them carry the top rating.
  k = B.n_data_files(f)
  reviewed = rng.sample([e for e in emps if e["active"]], k)
  n_top = rng.randint(1, max(1, k // 2))
  for j, e in enumerate(reviewed):
    fmt = (j + rng.randrange(3)) % 3
    scale = 10 if fmt == 1 else 5
    score = scale if j < n_top else scale - 1 if j == n_top else rng.randint(scale // 2, scale - 1)
    stem = f"reviews/review_{j + 1:03d}"
    if fmt == 0:
      ctx.write(f"{stem}.txt", f"Employee: {e['name']} (id {e['id']})\nPeriod: 2024-H1\nRating: {score}/{scale}\n\n"
                f"{G.sentence(rng, 14)}\n{G.sentence(rng, 10)}\n")
    elif fmt == 1:
      ctx.write(f"{stem}.json", json.dumps({"employee_id": e["id"], "period": "2024-H1", "score": score,
                                            "out_of": scale, "comment": G.sentence(rng, 12)}, indent=1) + "\n")
    else:
      ctx.write(f"{stem}.csv", f"employee_id,period,rating,max_rating,comment\n{e['id']},2024-H1,{score},{scale},"
                f"{G.sentence(rng, 8)}\n")
  # The distractor of earliest_hire_sales without 'Sales' (base.Task.conditions; drawn last, so the rest of the
  # state is what it would be without it): an active employee of another department hired before 2005, before
  # every other active employee.
  rng.choice([e for e in emps if e["active"] and e["dept_id"] != 2])["hire_date"] = G.rand_date(rng, "2004-01-01",
                                                                                                 "2004-12-31")
  G.insert_rows(ctx, "employees", emps)


def _get_employee(ctx, employee_id):
  r = ctx.q1("SELECT * FROM employees WHERE id = ?", employee_id)
  if r is None:
    raise ToolError(f"no employee with id {employee_id}")
  return r


def _update_salary(ctx, employee_id, salary):
  _get_employee(ctx, employee_id)
  if salary <= 0:
    raise ToolError("salary must be positive")
  ctx.exec("UPDATE employees SET salary = ? WHERE id = ?", float(salary), employee_id)
  return {"id": employee_id, "salary": float(salary)}


def _timesheet(ctx, employee_id):
  e = _get_employee(ctx, employee_id)
  t = ctx.q1("SELECT * FROM timesheets WHERE employee_id = ?", employee_id)
  if t is None:   # error objects, not failed calls: the program must look at the result
    return {"ok": False, "employee_id": employee_id,
            "error": f"no timesheet for {e['name']}: not on the payroll in June 2024"}
  key = ("timesheet", employee_id)
  ctx.calls[key] = ctx.calls.get(key, 0) + 1
  if ctx.calls[key] <= t["busy"]:
    return {"ok": False, "employee_id": employee_id, "error": "timesheet service busy, try again"}
  hours = f"{t['hours']:g}"
  extra = f"{t['overtime']:g} h of it overtime" if t["overtime"] else "no overtime"
  return {"employee_id": employee_id,
          "summary": f"June 2024 for {e['name']}: {hours} h logged, {extra}; approved by the line manager."}


TOOLS = (
    B.list_tool("list_departments", "List the departments {id, name, location}.", table="departments",
                columns="id, name, location", filters=[
                    B.Filter("name", "name = ?", B.p_str("department name"))]),
    B.list_tool("list_employees", "List employees {id, name, dept_id, title, salary, manager_id, hire_date, active} "
                "(active is 1 for current staff, 0 for people who left), filtered.", table="employees",
                columns="id, name, dept_id, title, salary, manager_id, hire_date, active", filters=[
                    B.Filter("department_id", "dept_id = ?", B.p_int("department id")),
                    B.Filter("active", "active = ?", B.p_int("1: current staff only; 0: people who left only")),
                    B.Filter("title", "title = ?", B.p_str("job title", TITLES)),
                    B.Filter("manager_id", "manager_id = ?", B.p_int("only the direct reports of this employee")),
                    B.Filter("hired_before", "hire_date < ?", B.p_str("only people hired before this date "
                                                                      "(YYYY-MM-DD)"))]),
    B.tool("get_employee", "Get one employee with all fields.", _get_employee, required=("employee_id",),
           employee_id=B.p_int("employee id")),
    B.tool("update_salary", "Set one employee's salary.", _update_salary, required=("employee_id", "salary"),
           employee_id=B.p_int("employee id"), salary=B.p_num("new yearly salary")),
    B.tool("get_timesheet", "An employee's June 2024 timesheet summary: {employee_id, summary} (text), or {ok: false, "
           "error} when there is none or the service is busy.", _timesheet, required=("employee_id",),
           employee_id=B.p_int("employee id")),
    B.LIST_FILES, B.READ_FILE, B.WRITE_FILE,
)

DOMAIN = B.Domain("hr", "A company's departments and employees.", SCHEMA, generate, TOOLS)

# The oracles' shared paging helper (the first program of every task defines it).
PAGES = B.paging_prelude("fetch_all")

AVG_ENG = """\
dept = tools["list_departments"](name="Engineering")["items"][0]
sal = [e["salary"] for e in fetch_all("list_employees", department_id=dept["id"], active=1)]
avg = round(sum(sal) / len(sal), 2)
print(len(sal), avg)
tools["submit_answer"](answer=avg)
"""

RAISE = r"""
import json, re
raised = []
for path in tools["list_files"](directory="reviews"):
    text = tools["read_file"](path=path)["content"]
    if path.endswith(".json"):
        d = json.loads(text)
        emp_id, rating, scale = d["employee_id"], d["score"], d["out_of"]
    elif path.endswith(".csv"):
        head, row = text.splitlines()[:2]
        d = dict(zip(head.split(","), row.split(",")))
        emp_id, rating, scale = int(d["employee_id"]), int(d["rating"]), int(d["max_rating"])
    else:
        emp_id = int(re.search(r"\(id (\d+)\)", text).group(1))
        rating, scale = map(int, re.search(r"Rating:\s*(\d+)/(\d+)", text).groups())
    if rating == scale:
        emp = tools["get_employee"](employee_id=emp_id)
        new = round(emp["salary"] * 1.10, 2)
        tools["update_salary"](employee_id=emp_id, salary=new)
        raised.append((emp_id, new))
tools["write_file"](path="payroll/raises.csv",
                    content="employee_id,new_salary\n" + "".join(f"{i},{s:.2f}\n" for i, s in sorted(raised)))
print("raised", raised)
tools["submit_answer"]()
"""

CROSS = """\
staff = fetch_all("list_employees", department_id=6, active=1)
mgr_dept = {}
for e in staff:
    m = e["manager_id"]
    if m is not None and m not in mgr_dept:
        mgr_dept[m] = tools["get_employee"](employee_id=m)["dept_id"]
ids = sorted(e["id"] for e in staff if e["manager_id"] is not None and mgr_dept[e["manager_id"]] != e["dept_id"])
print(len(ids))
tools["submit_answer"](answer=ids)
"""

EARLIEST = """\
dept = tools["list_departments"](name="Sales")["items"][0]
staff = fetch_all("list_employees", department_id=dept["id"], active=1)
first = min(staff, key=lambda e: (e["hire_date"], e["id"]))
print(first["name"], first["hire_date"])
tools["submit_answer"](answer=first["name"])
"""

OVERTIME = r"""
import re
dept = tools["list_departments"](name="Legal")["items"][0]
total = 0.0
for e in fetch_all("list_employees", department_id=dept["id"], active=1):
    for attempt in range(10):
        res = tools["get_timesheet"](employee_id=e["id"])
        if res.get("ok", True):
            break
    m = re.search(r"([\d.]+) h of it overtime", res["summary"])
    total += float(m.group(1)) if m else 0.0
print(round(total, 1))
tools["submit_answer"](answer=round(total, 1))
"""


def _salaries(ctx):
  return {r["id"]: r["salary"] for r in ctx.q("SELECT id, salary FROM employees")}


def _review(rel, text):
  if rel.endswith(".json"):
    d = read_records(rel, text)[0]
    return d["employee_id"], d["score"] == d["out_of"]
  if rel.endswith(".csv"):
    d = read_records(rel, text)[0]
    return int(d["employee_id"]), d["rating"] == d["max_rating"]
  a, b = re.search(r"Rating:\s*(\d+)/(\d+)", text).groups()
  return int(re.search(r"\(id (\d+)\)", text).group(1)), a == b


def _raise_expected(ctx):
  targets = [i for i, top in (_review(rel, ctx.read(rel)) for rel in ctx.files("reviews")) if top]
  return {"salaries": _salaries(ctx), "targets": targets}


def _raise_check(ctx, e, a):
  want = {int(k): v for k, v in e["salaries"].items()}
  for i in e["targets"]:
    want[i] = round(want[i] * 1.10, 2)
  got = _salaries(ctx)
  if got.keys() != want.keys() or any(abs(got[k] - want[k]) > 0.006 for k in want):
    return False
  text = ctx.read("payroll/raises.csv")
  if text is None:
    return False
  rows = {}
  for line in text.strip().splitlines()[1:]:
    parts = [p.strip() for p in line.split(",")]
    try:
      rows[int(parts[0])] = float(parts[1])
    except (ValueError, IndexError):
      return False
  return rows.keys() == set(e["targets"]) and all(abs(rows[i] - want[i]) <= 0.006 for i in rows)


def _cross(ctx):
  return [r["id"] for r in ctx.q("SELECT e.id FROM employees e JOIN employees m ON m.id = e.manager_id "
                                 "WHERE e.dept_id = 6 AND e.active = 1 AND m.dept_id != e.dept_id ORDER BY e.id")]


TASKS = [
    B.Task(DOMAIN, "avg_salary_engineering",
           "What is the average salary of the active employees of the Engineering department? Round it to 2 "
           "decimals.", (PAGES, AVG_ENG),
           lambda ctx: round(ctx.scalar("SELECT AVG(salary) FROM employees WHERE dept_id = 1 AND active = 1"), 2),
           answer="number", wrong=(", active=1)", ")"),
           conditions=(("Engineering", ('department_id=dept["id"], ', '')),)),
    B.Task(DOMAIN, "raise_top_rated",
           "Every employee whose review in reviews/ has the top rating of its scale gets a 10% raise: set their "
           "salary to round(salary * 1.10, 2). Change no other salary. Then write payroll/raises.csv with the "
           "header line 'employee_id,new_salary' and one line per raised employee (new salary with 2 decimals).",
           (PAGES, RAISE), _raise_expected, check=_raise_check,
           wrong=("if rating == scale:", "if rating >= scale - 1:"),
           tags=("explore", "writeback")),
    B.Task(DOMAIN, "cross_dept_managers",
           "Which active employees of the Legal department have a manager who works in a different department? "
           "Submit their employee ids.", (PAGES, CROSS), _cross, answer="set", wrong=(", active=1)", ")"),
           conditions=(("Legal", ('department_id=6, ', '')),)),
    B.Task(DOMAIN, "earliest_hire_sales",
           "Who is the active employee of the Sales department with the earliest hire date? Submit the name "
           "(on a tie, the employee with the smaller id).", (PAGES, EARLIEST),
           lambda ctx: ctx.scalar("SELECT name FROM employees WHERE dept_id = 2 AND active = 1 "
                                  "ORDER BY hire_date, id LIMIT 1"), answer="text", wrong=(", active=1)", ")"),
           conditions=(("Sales", ('department_id=dept["id"], ', '')),)),
    B.Task(DOMAIN, "overtime_legal",
           "How many hours of overtime did the active employees of the Legal department log in June 2024 in "
           "total, according to their timesheets? Submit the number of hours (1 decimal).", (PAGES, OVERTIME),
           lambda ctx: round(ctx.scalar("SELECT COALESCE(SUM(t.overtime), 0) FROM timesheets t JOIN employees e "
                                        "ON e.id = t.employee_id WHERE e.dept_id = 6 AND e.active = 1"), 1),
           answer="number", wrong=(r"([\d.]+) h of it overtime", r"([\d.]+) h logged"), tags=("errors",),
           conditions=(("Legal", ('department_id=dept["id"], ', '')),)),
]

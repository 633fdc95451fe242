"""HR domain: departments and employees; performance reviews are workspace files."""

from __future__ import annotations

import random
import re

from progagent.tasks import base as B
from progagent.tasks.base import Ctx, ToolError

DEPARTMENTS = ("Engineering", "Sales", "Marketing", "Finance", "Support", "Legal", "Operations", "Research")
TITLES = ("Associate", "Specialist", "Senior Specialist", "Lead", "Manager", "Director")

SCHEMA = """
CREATE TABLE departments (id INTEGER PRIMARY KEY, name TEXT, location TEXT, budget REAL);
CREATE TABLE employees (id INTEGER PRIMARY KEY, name TEXT, email TEXT, dept_id INTEGER, title TEXT,
                        salary REAL, manager_id INTEGER, hire_date TEXT, active INTEGER, phone TEXT,
                        address TEXT);
CREATE INDEX employees_dept ON employees(dept_id);
"""


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  B.insert_rows(ctx, "departments", [{"id": i + 1, "name": d, "location": rng.choice(B.CITIES),
                                      "budget": float(rng.randint(5, 50) * 100_000)}
                                     for i, d in enumerate(DEPARTMENTS)])
  n = 670 * f
  names = B.unique_names(rng, n + 1)
  emps = []
  for i in range(n):
    emps.append({"id": i + 1, "name": names[i], "email": B.email_of(names[i], i + 1, "corp.example"),
                 "dept_id": rng.choices(range(1, 9), (5, 4, 2, 2, 3, 1, 2, 2))[0], "title": rng.choice(TITLES),
                 "salary": round(rng.uniform(40_000, 160_000), 2),
                 "manager_id": rng.randint(1, i) if i >= 4 else None,
                 "hire_date": B.rand_date(rng, "2005-01-01", "2024-06-01"), "active": int(rng.random() < 0.85),
                 "phone": f"+351 21 {rng.randint(100, 999)} {rng.randint(1000, 9999)}",
                 "address": f"{rng.randint(1, 200)} {rng.choice(B.LAST)} Road, {rng.choice(B.CITIES)}"})
  # A departed Sales employee hired before anyone else (the trap of the earliest-hire task).
  emps.append(dict(emps[0], id=n + 1, name=names[n], email=B.email_of(names[n], n + 1, "corp.example"),
                   dept_id=2, hire_date="1998-03-02", active=0, manager_id=None))
  for d in range(1, 9):   # every department has active staff
    emps[d]["dept_id"], emps[d]["active"] = d, 1
  B.insert_rows(ctx, "employees", emps)
  B.write_docs(ctx, rng, "hr", ["leave_policy", "benefits", "review_process", "onboarding", "org_chart"])
  k = B.n_data_files(f)
  reviewed = rng.sample([e for e in emps if e["active"]], k)
  for j, e in enumerate(reviewed):
    rating = 5 if j == 0 else 4 if j == 1 else rng.choices((2, 3, 4, 5), (1, 3, 3, 3))[0]
    ctx.write(f"reviews/review_{j + 1:03d}.txt",
              f"Employee: {e['name']} (id {e['id']})\nPeriod: 2024-H1\nRating: {rating}/5\n\n"
              f"{B.sentence(rng, 14)}\n{B.sentence(rng, 10)}\n")


def _list_employees(ctx, department_id):
  if ctx.q1("SELECT id FROM departments WHERE id = ?", department_id) is None:
    raise ToolError(f"no department with id {department_id}; list_departments gives the ids")
  return ctx.q("SELECT id, name, title, salary, manager_id, hire_date, active FROM employees "
               "WHERE dept_id = ? ORDER BY id", department_id)


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


TOOLS = (
    B.tool("list_departments", "List the departments: [{id, name, location}].",
           lambda ctx: ctx.q("SELECT id, name, location FROM departments ORDER BY id")),
    B.tool("list_employees", "List a department's employees: [{id, name, title, salary, manager_id, hire_date, "
           "active}] (active is 1 for current staff, 0 for people who left).", _list_employees,
           required=("department_id",), department_id=B.p_int("department id")),
    B.tool("get_employee", "Get one employee with all fields.", _get_employee, required=("employee_id",),
           employee_id=B.p_int("employee id")),
    B.tool("update_salary", "Set one employee's salary.", _update_salary, required=("employee_id", "salary"),
           employee_id=B.p_int("employee id"), salary=B.p_num("new yearly salary")),
    B.LIST_FILES, B.READ_FILE,
)

DOMAIN = B.Domain("hr", "A company's departments and employees.", SCHEMA, generate, TOOLS)

AVG_ENG = """\
dept = next(d for d in tools["list_departments"]() if d["name"] == "Engineering")
sal = [e["salary"] for e in tools["list_employees"](department_id=dept["id"]) if e["active"]]
avg = round(sum(sal) / len(sal), 2)
print(len(sal), avg)
tools["submit_answer"](answer=avg)
"""

RAISE = r"""
import re
raised = []
for path in tools["list_files"](directory="reviews"):
    text = tools["read_file"](path=path)["content"]
    if re.search(r"Rating:\s*5/5", text):
        emp_id = int(re.search(r"\(id (\d+)\)", text).group(1))
        emp = tools["get_employee"](employee_id=emp_id)
        tools["update_salary"](employee_id=emp_id, salary=round(emp["salary"] * 1.10, 2))
        raised.append(emp_id)
print("raised", raised)
tools["submit_answer"]()
"""

CROSS = """\
emps = {}
for d in tools["list_departments"]():
    for e in tools["list_employees"](department_id=d["id"]):
        emps[e["id"]] = dict(e, dept=d["id"])
n = sum(1 for e in emps.values()
        if e["active"] and e["manager_id"] is not None and emps[e["manager_id"]]["dept"] != e["dept"])
print(n)
tools["submit_answer"](answer=n)
"""

EARLIEST = """\
dept = next(d for d in tools["list_departments"]() if d["name"] == "Sales")
staff = [e for e in tools["list_employees"](department_id=dept["id"]) if e["active"]]
first = min(staff, key=lambda e: (e["hire_date"], e["id"]))
print(first["name"], first["hire_date"])
tools["submit_answer"](answer=first["name"])
"""


def _salaries(ctx):
  return {r["id"]: r["salary"] for r in ctx.q("SELECT id, salary FROM employees")}


def _raise_expected(ctx):
  targets = []
  for rel in ctx.files("reviews"):
    text = ctx.read(rel)
    if re.search(r"Rating:\s*5/5", text):
      targets.append(int(re.search(r"\(id (\d+)\)", text).group(1)))
  return {"salaries": _salaries(ctx), "targets": targets}


def _raise_check(ctx, e, a):
  want = dict(e["salaries"])
  for i in e["targets"]:
    want[i] = round(want[i] * 1.10, 2)
  got = _salaries(ctx)
  return got.keys() == want.keys() and all(abs(got[k] - want[k]) < 0.006 for k in want)


TASKS = [
    B.Task(DOMAIN, "avg_salary_engineering",
           "What is the average salary of the active employees of the Engineering department? Round it to 2 "
           "decimals.", (AVG_ENG,),
           lambda ctx: round(ctx.scalar("SELECT AVG(salary) FROM employees WHERE dept_id = 1 AND active = 1"), 2),
           answer="number", wrong=(' if e["active"]', "")),
    B.Task(DOMAIN, "raise_top_rated",
           "Every employee whose review in reviews/ has the rating 5/5 gets a 10% raise: set their salary to "
           "round(salary * 1.10, 2). Change no other salary.", (RAISE,), _raise_expected, check=_raise_check,
           wrong=(r"Rating:\s*5/5", r"Rating:\s*[45]/5")),
    B.Task(DOMAIN, "cross_dept_managers",
           "How many active employees have a manager who works in a different department than they do?",
           (CROSS,), lambda ctx: ctx.scalar(
               "SELECT COUNT(*) FROM employees e JOIN employees m ON m.id = e.manager_id "
               "WHERE e.active = 1 AND m.dept_id != e.dept_id"), answer="int", wrong=('e["active"] and ', "")),
    B.Task(DOMAIN, "earliest_hire_sales",
           "Who is the active employee of the Sales department with the earliest hire date? Submit the name "
           "(on a tie, the employee with the smaller id).", (EARLIEST,),
           lambda ctx: ctx.scalar("SELECT name FROM employees WHERE dept_id = 2 AND active = 1 "
                                  "ORDER BY hire_date, id LIMIT 1"), answer="text", wrong=(' if e["active"]', "")),
]

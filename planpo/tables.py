"""The rows of PlanPO's two tables (configs/planpo_base.py sets `runs` from them; planpo.train.table_tag names a
run of any other rows apart so it never overwrites a full table's outputs)."""

# The main table: the no-training baseline, the SFT policy and the three methods (issue 10, SPEC.md PlanPO).
MAIN_RUNS = ("random", "sft", "grpo", "gigpo", "planpo")
# The paper's ablation table: full PlanPO against its four ablations, with the SFT policy as the floor.
ABLATION_RUNS = ("sft", "planpo", "planpo_no_ae", "planpo_no_as", "planpo_unconditional", "planpo_constant_alpha")
TABLE_RUNS = {"main": MAIN_RUNS, "ablation": ABLATION_RUNS}

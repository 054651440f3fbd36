"""The project's studies beside the product: what the four command lines (calculate_oracle_v.py, run_tracecov.py,
grpo_train.sh, make_figures.py) never reach. Each study imports the package ``grpo_mse``; nothing in the package
imports a study (tests/structure/test_studies.py). Their command lines are the files under scripts/,
their tests tests/studies/."""

"""ALFWorld tasks authored for this project (package data of `prover_jax.envs.alfworld`).

Layout `<split>/<task_type>-<object>-None-<target>-<scene>/trial_P<scene>/` with ALFWorld's three files;
regenerate with `python -m prover_jax.envs.alfworld.tasks.make_tasks`.
"""

"""``gpulab tune``: a measured search over the speed knobs of a run, on this machine, for this recipe.

Each engine's tuner (``capability(engine, "tune").tuner()``: engines/<name>/tune.py and tune_space.py)
says which values of each knob are worth a trial here (and why the others are not), in what order, and how
one trial trains; ``trial.py`` runs one short real fit through it and measures it; ``search.py`` walks the
knobs greedily under a time budget, with the divergence guard and the pruning rules; ``report.py`` writes
tuned.yaml and tune.json and prints the table and one sentence per knob; ``plot.py`` draws tune.png.
"""

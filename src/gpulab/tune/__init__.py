"""``gpulab tune``: a measured search over the speed knobs of a run, on this machine, for this recipe.

``space.py`` says which values of each knob are worth a trial here (and why the others are not);
``trial.py`` runs one short real fit through the Trainer and measures it; ``search.py`` walks the knobs
greedily under a time budget, with the divergence guard and the pruning rules; ``report.py`` writes
tuned.yaml and tune.json and prints the table and one sentence per knob.
"""

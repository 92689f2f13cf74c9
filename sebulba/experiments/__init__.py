"""What the experiment tools are made of (`sebulba.sweep`, `sebulba.evaluate`, `sebulba.plot`).

  sweep_plan    what a sweep is: its definition, its runs and their directories, checked
                before any run
  sweep_report  its results: per-setting statistics over seeds, Atari aggregates, the
                console table
  atari_scores  human and random scores of the Atari games, for human-normalised scores

The commands themselves are sebulba/sweep.py, sebulba/evaluate.py and sebulba/plot.py.
"""

"""Population-based training (PBT): a population of runs whose hyperparameters evolve.

`sebulba.pbt.settings` checks the config's `pbt` section; `sebulba.pbt.population` holds
the population's host-side state and makes its exploit/explore decisions;
`sebulba.anakin.population` trains a population as one vmapped Anakin program;
`sebulba.pbt.runs` (`python -m sebulba.pbt`) a population of separate runs;
`sebulba.pbt.plot` draws one. docs/pbt.md describes the whole.
"""

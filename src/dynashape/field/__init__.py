"""The field's length-control methods as pure functions (layer 1) and small stateful parts (layer 2).

One module per method: L1 (`l1`), ThinkPrune (`thinkprune`), LASER and LASER-D (`laser`), DLER (`dler`),
ALP (`alp`), A-DLP (`adlp`), AALC (`aalc`), SAW (`saw`), GFPO (`gfpo`). Each module's docstring names the
paper, the official code (repository, path, commit read) and where code and paper differ. These are building
blocks: the registered shapers compose them. Imports only the core (`dynashape.groups`, `dynashape._checks`).
"""

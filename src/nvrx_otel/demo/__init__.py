"""``nvrx-otel demo``: a simulated training job on one machine, with real processes.

:mod:`.cli` runs it: one aggregator per simulated node (:mod:`.nodes`), a launcher
(:mod:`.launcher`) that starts the ranks (:mod:`.rank`) cycle by cycle, and the progress
display (:mod:`.progress`). :mod:`.plan` holds the options, the output layout and each
process's environment.
"""

"""The command line (`dsh-sidecar`, `python -m sidecar.cli`): parses flags, starts the pollers and the
servers below it, prints summaries and runs `doctor`. The top layer: nothing imports it."""

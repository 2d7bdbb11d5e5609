"""`python -m sidecar.cli ARGS`: the same program as the `dsh-sidecar` console script."""

import sys

from sidecar.cli.main import main

sys.exit(main())

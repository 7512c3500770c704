"""``python -m nvrx_otel.logging.aggregator``: the node log aggregator service (see
:mod:`nvrx_otel.aggregator.cli` for the flags)."""

import sys

from nvrx_otel.aggregator.cli import main

if __name__ == "__main__":
    sys.exit(main())

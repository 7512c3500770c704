"""``python -m nvrx_otel`` runs the ``nvrx-otel`` command."""

import sys

from nvrx_otel.cli import main

sys.exit(main())

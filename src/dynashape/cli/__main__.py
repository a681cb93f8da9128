"""``python -m dynashape.cli``: the ``dynashape`` command (the study engine starts its runs this way)."""

import sys

from dynashape.cli import main

sys.exit(main())
